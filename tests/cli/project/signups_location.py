"""The Dagster code location of the `signups` test pipeline, for the `dagster` CLI tests."""

from signups import pipeline

from lakelog.assets.location import build_definitions

defs = build_definitions(pipeline)
