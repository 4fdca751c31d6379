"""A failed blocking check stops the consumers of its table in later runs too, until it passes."""

from __future__ import annotations

import dagster as dg
from pyspark.sql import functions as F
from shop_records import SHOP_RECORDS

from lakelog.assets import gates
from lakelog.assets.location import build_definitions
from lakelog.consumers import lag
from lakelog.demo.shop import CONSUMERS, TOPICS
from lakelog.pipeline import Pipeline
from lakelog.quality import names

ORDERS = TOPICS["orders"]
ORDERS_KEY = dg.AssetKey(["log", "orders"])
STATS = dg.AssetKey(["streams", "product_stats"])
CHECK = f"log/orders:{names.TOPIC_CHECK}"
PIPELINE = Pipeline("gated", topics=TOPICS, consumers=CONSUMERS)


def behind(lake) -> int:
    return sum(x.lag for x in lag(lake, CONSUMERS["product_stats"], TOPICS))


def test_a_failed_topic_check_stops_its_consumers_until_it_passes(shop_lake, resources):
    defs = build_definitions(PIPELINE, resources=resources)
    instance = dg.DagsterInstance.ephemeral()
    pipeline = defs.resolve_job_def("pipeline")
    microbatch = defs.resolve_job_def("microbatch_product_stats")
    # A record with a duplicate offset and no key gets into the log behind lakelog's back.
    clean = {f.path for f in shop_lake.snapshot(ORDERS.path).files()}
    log = shop_lake.read(shop_lake.snapshot(ORDERS.path))
    shop_lake.write(shop_lake.snapshot(ORDERS.path),
                    log.limit(1).withColumn("key", F.lit(None).cast("string")))
    damage = [f for f in shop_lake.snapshot(ORDERS.path).files() if f.path not in clean]

    checked = pipeline.execute_in_process(
        instance=instance, asset_selection=[ORDERS_KEY], raise_on_error=False
    )
    [failed] = checked.get_asset_check_evaluations()
    assert not failed.passed and failed.severity == dg.AssetCheckSeverity.ERROR

    blocked = microbatch.execute_in_process(instance=instance)  # a later run, consumer alone
    assert blocked.success
    assert not blocked.get_asset_materialization_events()
    assert behind(shop_lake) == SHOP_RECORDS  # nothing consumed
    observed = {e.event_specific_data.asset_observation.asset_key:
                e.event_specific_data.asset_observation.metadata
                for e in blocked.all_events if e.event_type_value == "ASSET_OBSERVATION"}
    assert observed[STATS]["blocked_by"].value == [CHECK]
    assert checked.run_id in observed[STATS]["blocked_because"].value

    shop_lake.write(shop_lake.snapshot(ORDERS.path), None, remove=damage)  # repaired
    rechecked = pipeline.execute_in_process(instance=instance, asset_selection=[ORDERS_KEY])
    [passed] = rechecked.get_asset_check_evaluations()
    assert passed.passed

    resumed = microbatch.execute_in_process(instance=instance)
    assert STATS in {e.asset_key for e in resumed.get_asset_materialization_events()}
    assert behind(shop_lake) == 0


def test_the_sensor_leaves_a_stopped_consumer_out(shop_lake, resources):
    defs = build_definitions(PIPELINE, resources=resources)
    instance = dg.DagsterInstance.ephemeral()
    log = shop_lake.read(shop_lake.snapshot(ORDERS.path))
    shop_lake.write(shop_lake.snapshot(ORDERS.path),
                    log.limit(1).withColumn("key", F.lit(None).cast("string")))
    defs.resolve_job_def("pipeline").execute_in_process(
        instance=instance, asset_selection=[ORDERS_KEY], raise_on_error=False
    )

    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        [request] = defs.resolve_sensor_def("pipeline")(context).run_requests

    assert STATS not in request.asset_selection  # it reads the failed log/orders
    assert dg.AssetKey(["streams", "cart_state"]) in request.asset_selection  # cart events only


def test_a_check_whose_run_ended_before_it_ran_blocks_until_it_runs():
    """No verdict is no pass: a run that failed before its blocking check ran leaves the check
    planned, never evaluated; the gate blocks on it, as Dagster's in-run blocking would, and a
    later run's verdict lifts that."""
    key = dg.AssetKey(["log", "gated"])
    spec = dg.AssetCheckSpec("valid", asset=key, blocking=True)
    fail = {"now": True}

    @dg.asset(key=key, check_specs=[spec])
    def gated():
        if fail["now"]:
            raise RuntimeError("the run ends before the check runs")
        yield dg.MaterializeResult()
        yield dg.AssetCheckResult(check_name="valid", passed=True)

    instance = dg.DagsterInstance.ephemeral()
    assert not gates.verdict(instance, spec.key).blocks  # never executed: nothing to wait for
    failed = dg.materialize([gated], instance=instance, raise_on_error=False)
    assert not failed.success
    stuck = gates.verdict(instance, spec.key)
    assert stuck.blocks and stuck.unfinished and failed.run_id in stuck.reason
    assert gates.describe(gates.blocking([stuck])) == f"check log/gated:valid {stuck.reason}"

    fail["now"] = False
    assert dg.materialize([gated], instance=instance).success
    passed = gates.verdict(instance, spec.key)
    assert not passed.blocks and passed.record != stuck.record

    # A run waiting in the queue (behind the run under way) has planned the check already: it
    # has judged nothing, so the verdict stays the last run's; a started one's blocks.
    job = dg.Definitions(assets=[gated]).resolve_implicit_global_asset_job_def()
    queued = instance.create_run_for_job(job, status=dg.DagsterRunStatus.NOT_STARTED)
    [planned] = instance.event_log_storage.get_asset_check_execution_history(spec.key, limit=1)
    assert planned.run_id == queued.run_id and planned.event.asset_check_evaluation is None
    assert gates.verdict(instance, spec.key) == passed
    more = [instance.create_run_for_job(job, status=dg.DagsterRunStatus.NOT_STARTED)
            for _ in range(gates.LOOK_BACK - 1)]  # so many waiting that no verdict is in sight
    assert gates.verdict(instance, spec.key).blocks
    assert more[-1].run_id in gates.verdict(instance, spec.key).reason
    started = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
    running = gates.verdict(instance, spec.key)
    assert running.blocks and started.run_id in running.reason
