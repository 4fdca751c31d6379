"""Dagster resources: the Spark session, the lake and the CDC source database."""

from lakelog.resources.environments import Environment, build_resources
from lakelog.resources.lake import LakeResource
from lakelog.resources.source import SourceResource
from lakelog.resources.spark import SparkResource

__all__ = ["Environment", "LakeResource", "SourceResource", "SparkResource", "build_resources"]
