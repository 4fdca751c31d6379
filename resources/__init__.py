"""Dagster resources: the Spark session and the lake."""

from lakelog.resources.environments import Environment, build_resources
from lakelog.resources.lake import LakeResource
from lakelog.resources.spark import SparkResource

__all__ = ["Environment", "LakeResource", "SparkResource", "build_resources"]
