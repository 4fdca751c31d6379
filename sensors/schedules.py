"""Schedules: daily maintenance of the log."""

from __future__ import annotations

import dagster as dg


def maintenance_schedule(
    job: dg.JobDefinition, *, cron: str = "0 3 * * *"
) -> dg.ScheduleDefinition:
    """Runs `job` (retention and vacuum) every day at 03:00 UTC."""
    return dg.ScheduleDefinition(
        name="daily_maintenance", job=job, cron_schedule=cron, execution_timezone="UTC"
    )
