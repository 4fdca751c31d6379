"""Time partitions (DESIGN glossary: a *time* partition, the unit of backfill) of derived assets."""

import dagster as dg

#: Hours of event time; the demo workload starts on 2026-01-05, so its data falls inside.
HOURLY = dg.HourlyPartitionsDefinition(start_date="2026-01-01-00:00", timezone="UTC")

#: The key format of `HOURLY`'s partitions (Dagster's default for hourly partitions).
HOUR_KEY = "%Y-%m-%d-%H:%M"
