"""The maintenance job: expired log files removed (past every consumer's offset) and vacuumed;
merge-on-read tables squashed before their tombstones are purged."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import dagster as dg
from pyspark.sql import functions as F

from lakelog.assets.location import build_definitions
from lakelog.assets.maintenance import maintenance_job
from lakelog.consumers import run_until_caught_up
from lakelog.demo import shop_cdc
from lakelog.demo.shop import CONSUMERS, TOPICS
from lakelog.log.ingest import produce
from lakelog.log.offsets import partition_states
from lakelog.pipeline import Pipeline

PAGE_VIEWS = TOPICS["page_views"]


def test_maintenance_job_enforces_retention_and_reports_it(shop_lake, resources, now):
    # The shop's first page-view batch (u1's v1 and v4) is older than the 7-day retention;
    # u1's log partition also holds v5 from a later batch, its active file.
    run_until_caught_up(shop_lake, CONSUMERS["product_stats"], TOPICS, now=lambda: now)
    log = shop_lake.read(shop_lake.snapshot(PAGE_VIEWS.path)).collect()
    [u1] = {r.partition for r in log if r.key == "u1"}
    job = build_definitions(Pipeline("kept", topics=TOPICS, consumers=CONSUMERS),
                            resources=resources).resolve_job_def("maintenance")

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


def customer_change(op, key, lsn, ts_ms):
    row = {"customer_id": key, "name": f"n{lsn}", "email": "e@x", "country": "NL",
           "updated_at": "2026-03-01T12:00:00.000000Z"}
    return json.dumps({
        "before": row if op == "d" else None, "after": None if op == "d" else row, "op": op,
        "ts_ms": ts_ms, "source": {"connector": "postgresql", "ts_ms": ts_ms, "table": "customers",
                                   "lsn": lsn},
    })


def test_maintenance_folds_merge_on_read_tables_then_purges_their_tombstones(
    lake, spark, resources
):
    table = shop_cdc.COMPACTED["customers"]
    assert table.merge_on_read
    topics = {table.topic.name: table.topic}
    consumer = shop_cdc.SHOP.consumer_of("customers")
    month_ago = datetime.now(timezone.utc) - timedelta(days=30)
    stamp = int(month_ago.timestamp() * 1000)
    for lines in ([customer_change("c", 1, 10, stamp), customer_change("c", 2, 11, stamp)],
                  [customer_change("u", 2, 20, stamp)], [customer_change("d", 1, 30, stamp)]):
        produce(lake, spark, table.topic, lines, source="test", now=month_ago)
        run_until_caught_up(lake, consumer, topics, now=lambda: month_ago)
    assert len(lake.snapshot(table.path).files()) == 3  # three batches, three versions' files
    job = dg.Definitions(
        jobs=[maintenance_job(topics, {consumer.name: consumer}, [table])], resources=resources
    ).resolve_job_def("maintenance")

    result = job.execute_in_process(instance=dg.DagsterInstance.ephemeral())

    assert result.success
    # The squash drops the month-old tombstone with its key's older versions; the purge after it
    # finds nothing left in files that overlap no other.
    [squashed] = [e.metadata for e in result.asset_observations_for_node("squash_tables")]
    assert (squashed["files_squashed"].value, squashed["versions_read"].value,
            squashed["rows_written"].value, squashed["tombstones_purged"].value) == (3, 4, 1, 1)
    [purged] = [e.metadata for e in result.asset_observations_for_node("purge_tombstones")]
    assert purged["tombstones_purged"].value == 0
    rows = lake.read(lake.snapshot(table.path), all_versions=True).collect()
    assert [(r.customer_id, r.name) for r in rows] == [(2, "n20")]
