"""Dagster sensors and schedules: new data becomes one pipeline run per tick, the audits run
every ten minutes, maintenance daily."""

from lakelog.sensors.pipeline import pipeline_sensor
from lakelog.sensors.schedules import audit_schedule, maintenance_schedule

__all__ = ["audit_schedule", "maintenance_schedule", "pipeline_sensor"]
