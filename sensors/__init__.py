"""Dagster sensors and schedules: new data becomes one pipeline run per tick, maintenance runs
daily."""

from lakelog.sensors.pipeline import pipeline_sensor
from lakelog.sensors.schedules import maintenance_schedule

__all__ = ["maintenance_schedule", "pipeline_sensor"]
