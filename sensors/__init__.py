"""Dagster sensors and schedules: new data becomes runs, maintenance runs daily."""

from lakelog.sensors.capture import capture_sensor
from lakelog.sensors.landing import landing_sensor
from lakelog.sensors.offsets import log_sensor
from lakelog.sensors.schedules import maintenance_schedule

__all__ = ["capture_sensor", "landing_sensor", "log_sensor", "maintenance_schedule"]
