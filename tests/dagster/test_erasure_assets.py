"""The erase_subject job: the subject as run config, the erasure record as an asset with its
metadata, and the check that finds an erased subject again by its hash alone."""

from __future__ import annotations

import dagster as dg
from pyspark.sql import functions as F

from lakelog.assets.location import build_definitions
from lakelog.consumers import run_until_caught_up
from lakelog.demo.shop import CONSUMERS, TOPICS
from lakelog.erasure import recorded
from lakelog.erasure.subject import subject_hash
from lakelog.log.ingest import produce
from lakelog.pipeline import Pipeline

PIPELINE = Pipeline("erasing", topics=TOPICS, consumers=[CONSUMERS["product_stats"]],
                    subject_columns=("user_id",))


def test_erase_subject_job_erases_records_and_its_check_finds_a_returning_subject(
        shop_lake, spark, resources, now):
    run_until_caught_up(shop_lake, CONSUMERS["product_stats"], TOPICS, now=lambda: now)
    views = shop_lake.read(shop_lake.snapshot(TOPICS["page_views"].path))
    u1_views = views.where(F.col("user_id") == "u1").count()
    assert u1_views > 0
    erase = build_definitions(PIPELINE, resources=resources).resolve_job_def("erase_subject")
    instance = dg.DagsterInstance.ephemeral()

    def run(subject: str) -> dg.ExecuteInProcessResult:
        return erase.execute_in_process(
            run_config={"ops": {"_erasures": {"config": {"subject": subject}}}},
            instance=instance)

    result = run("u1")

    assert result.success
    [materialization] = result.asset_materializations_for_node("_erasures")
    metadata = materialization.metadata
    [erasure] = recorded(shop_lake)
    assert metadata["erasure_id"].value == erasure.erasure_id
    assert metadata["subject_hash"].value == subject_hash("u1", erasure.salt)
    assert metadata["consumers_rebuilt"].value == ["product_stats"]
    assert "| log/page_views |" in metadata["tables"].value
    assert metadata["rows_erased"].value >= u1_views
    for topic in TOPICS.values():
        if shop_lake.exists(topic.path):
            records = shop_lake.read(shop_lake.snapshot(topic.path))
            assert records.where(F.col("user_id") == "u1").isEmpty(), topic.name
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == "no_erased_subject" and check.passed

    # The subject comes back: the check (run after any erasure, here of nobody) fails.
    produce(shop_lake, spark, TOPICS["page_views"], [
        '{"event_id":"again","user_id":"u1","session_id":"s","page":"home",'
        '"device_time":"2026-03-01T11:00:00Z","sent_time":"2026-03-01T11:00:00Z",'
        '"received_time":"2026-03-01T11:00:01Z"}'], source="test", now=now)
    [check] = run("nobody").get_asset_check_evaluations()
    assert not check.passed
    assert check.metadata["tables_holding_erased_subjects"].value == {
        "log/page_views": [erasure.erasure_id]}
