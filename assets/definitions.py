"""The demo shop's code location (workspace.yaml, ``dagster dev`` in the repository root).

A pipeline of one's own gets its location from `build_definitions` the same way (`lakelog init`
writes that module).
"""

from lakelog.assets.location import build_definitions, build_location
from lakelog.demo.pipeline import pipeline

__all__ = ["build_definitions", "build_location", "defs"]

defs = build_definitions(pipeline)
