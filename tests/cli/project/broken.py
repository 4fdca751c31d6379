"""A pipeline module whose declaration is wrong: a consumer of a topic nobody declared."""

from signups import COPIES, SIGNUPS, copy

from lakelog.consumers import Consumer
from lakelog.pipeline import Pipeline

pipeline = Pipeline("broken", topics=[SIGNUPS],
                    consumers=[Consumer("copies", ("sign_ups",), (COPIES,), copy)])
