"""Schedules: daily maintenance of the log, and the audits of the live tables every few
minutes."""

from __future__ import annotations

import dagster as dg


def maintenance_schedule(
    job: dg.JobDefinition, *, cron: str = "0 3 * * *"
) -> dg.ScheduleDefinition:
    """Runs `job` (retention and vacuum) every day at 03:00 UTC."""
    return dg.ScheduleDefinition(
        name="daily_maintenance", job=job, cron_schedule=cron, execution_timezone="UTC"
    )


def audit_schedule(job: dg.JobDefinition, *, cron: str = "*/10 * * * *") -> dg.ScheduleDefinition:
    """Runs the `audit` job every ten minutes, from the start: the audits rebuild state to compare
    it with the live tables, too dear for every microbatch run and too useful to wait for a hand.
    """
    return dg.ScheduleDefinition(
        name="audits", job=job, cron_schedule=cron, execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
