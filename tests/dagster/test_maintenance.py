"""The maintenance job removes expired log files (past every consumer's offset) and vacuums."""

from __future__ import annotations

import dagster as dg
from pyspark.sql import functions as F

from lakelog.assets.definitions import build_definitions
from lakelog.consumers import run_until_caught_up
from lakelog.demo.shop import CONSUMERS, TOPICS
from lakelog.log import partition_states

PAGE_VIEWS = TOPICS["page_views"]


def test_maintenance_job_enforces_retention_and_reports_it(shop_lake, resources, now):
    # The shop's first page-view batch (u1's v1 and v4) is older than the 7-day retention;
    # u1's log partition also holds v5 from a later batch, its active file.
    run_until_caught_up(shop_lake, CONSUMERS["product_stats"], TOPICS, now=lambda: now)
    log = shop_lake.read(shop_lake.snapshot(PAGE_VIEWS.path)).collect()
    [u1] = {r.partition for r in log if r.key == "u1"}
    job = build_definitions(TOPICS, CONSUMERS, resources=resources).resolve_job_def("maintenance")

    result = job.execute_in_process(
        run_config={"ops": {"enforce_retention": {"config": {"vacuum_after_hours": 0}}}},
        instance=dg.DagsterInstance.ephemeral(),
    )

    assert result.success
    after = shop_lake.read(shop_lake.snapshot(PAGE_VIEWS.path))
    assert sorted(r.event_id for r in after.where(F.col("key") == "u1").collect()) == ["v5"]
    assert after.count() == len(log) - 2
    assert partition_states(shop_lake.snapshot(PAGE_VIEWS.path), 4)[u1].start_offset == 2

    events = result.asset_observations_for_node("enforce_retention")
    observed = {e.asset_key.path[1]: e.metadata for e in events}
    assert set(observed) == {"page_views", "cart_events", "orders"}  # the topics with a log
    page_views = observed["page_views"]
    assert page_views["removed_records"].value == 2
    assert page_views["vacuumed_files"].value >= page_views["removed_files"].value >= 1
    assert page_views["start_offsets"].value[str(u1)] == 2
    assert observed["orders"]["removed_records"].value == 0  # a log partition's only file stays
