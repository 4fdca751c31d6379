"""Quality checks in Dagster: a blocking topic check stops the models downstream of the topic in
the same run, and a model's warning check reports what GX found without stopping anything."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
from pyspark.sql import functions as F
from shop_records import order

from lakelog.assets import quality
from lakelog.assets.naming import topic_key
from lakelog.assets.quality import quality_checks, topic_check
from lakelog.assets.topics import topic_asset, topic_assets
from lakelog.assets.views import lakelog_tables, view_definitions
from lakelog.demo.shop import CONSUMERS, TOPICS
from lakelog.demo.shop_cdc import COMPACTED, SHOP
from lakelog.quality import names

MODELS = Path(__file__).parents[2] / "dbt_like_views"
ORDERS = TOPICS["orders"]
ORDERS_KEY = dg.AssetKey(["log", "orders"])
CLV = dg.AssetKey(["views", "customer_lifetime_value"])
INVENTORY = dg.AssetKey(["views", "inventory_remaining"])
COUNTED = datetime(2026, 1, 5, 0, 0, tzinfo=timezone.utc)


def write_table(lake, spark, name: str, rows: list[tuple]) -> None:
    output = COMPACTED[name].output
    lake.create_table(output.path, output.schema)
    lake.write(lake.snapshot(output.path), spark.createDataFrame(rows, output.schema))


def test_a_failing_topic_check_blocks_the_models_downstream(shop_lake, resources, land, spark):
    write_table(shop_lake, spark, "customers", [
        (1, "ann", "ann@shop", "NL", COUNTED, "01", "c", False, COUNTED),
    ])
    write_table(shop_lake, spark, "inventory", [
        ("p1", "north", 5, COUNTED, "02", "c", False, COUNTED),  # the orders take 2 + 2: fine
        ("p2", "north", 1, COUNTED, "03", "c", False, COUNTED),  # the orders take 1 + 3: oversold
    ])
    land("orders", "b.ndjson", [order("o7", "u-000001", [("p1", 2, 5.0), ("p2", 3, 5.0)], 20)])
    tables = lakelog_tables({**TOPICS, **SHOP.changelogs}, {**CONSUMERS, **SHOP.consumers})
    tables["streams/search_clicks"] = dg.AssetKey(["streams", "search_clicks"])
    models = {a.key: a for a in view_definitions(MODELS, tables)}
    run = [topic_asset(ORDERS), topic_check(ORDERS), models[CLV], models[INVENTORY]]

    passing = dg.materialize(run, resources=resources)
    assert passing.success
    [check] = [e for e in passing.get_asset_check_evaluations() if e.asset_key == ORDERS_KEY]
    assert check.passed and check.check_name == names.TOPIC_CHECK
    materialized = {e.asset_key for e in passing.get_asset_materialization_events()}
    assert {CLV, INVENTORY} <= materialized
    [ann] = shop_lake.read(shop_lake.snapshot("views/customer_lifetime_value")).collect()
    assert (ann.customer_id, ann.orders, float(ann.lifetime_value)) == (1, 1, 25.0)

    # The view's range check warns about the oversold product, with GX's findings.
    warnings = {e.check_name: e for e in passing.get_asset_check_evaluations()
                if e.asset_key == INVENTORY}
    ranges = warnings[names.VALUE_RANGES]
    assert not ranges.passed and ranges.severity == dg.AssetCheckSeverity.WARN
    [found] = ranges.metadata["results"].value
    assert found["expectation"] == "expect_column_values_to_be_between"
    assert (found["arguments"]["column"], found["arguments"]["min_value"]) == ("remaining", 0)
    assert found["unexpected_count"] == 1 and found["unexpected_sample"] == [-3]
    assert ranges.metadata["failed_expectations"].value == ["expect_column_values_to_be_between"]

    # A record with a duplicate offset and no key gets into the log behind lakelog's back.
    log = shop_lake.read(shop_lake.snapshot(ORDERS.path))
    shop_lake.write(shop_lake.snapshot(ORDERS.path),
                    log.limit(1).withColumn("key", F.lit(None).cast("string")))

    blocked = dg.materialize(run, resources=resources, raise_on_error=False)
    [check] = [e for e in blocked.get_asset_check_evaluations() if e.asset_key == ORDERS_KEY]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert set(check.metadata["failed_expectations"].value) == {
        "expect_column_values_to_not_be_null", "expect_no_unexpected_rows",
    }
    assert check.metadata["unexpected_count"].value == 2  # one null key, one repeated offset
    materialized = {e.asset_key for e in blocked.get_asset_materialization_events()}
    assert ORDERS_KEY in materialized and not {CLV, INVENTORY} & materialized



def test_the_topic_checks_run_as_one_step_each_with_its_own_verdict(shop_lake, resources):
    log = shop_lake.read(shop_lake.snapshot(ORDERS.path))  # a duplicate offset, behind our back
    shop_lake.write(shop_lake.snapshot(ORDERS.path), log.limit(1))
    log_checks = quality_checks(TOPICS)

    result = dg.materialize([topic_assets(list(TOPICS.values())), *log_checks],
                            resources=resources, raise_on_error=False)

    verdicts = {e.asset_key.path[-1]: e.passed for e in result.get_asset_check_evaluations()}
    assert verdicts == {"page_views": True, "cart_events": True, "orders": False,
                        "searches": True, "clicks": True}  # the last two: no table yet
    steps = {e.step_key for e in result.all_events if e.event_type_value == "STEP_START"}
    assert steps == {"ingest"} | {f"log__{t}_log_integrity" for t in TOPICS}
    failed = {e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"}
    assert failed == {"log__orders_log_integrity"}  # a blocking check failed: its step alone


def test_a_topic_check_validates_what_was_appended_since_it_passed(shop_lake, resources, land):
    """On one instance, a second execution validates only the new records, and one that
    failed leaves the next to validate the whole table again."""
    instance = dg.DagsterInstance.ephemeral()
    run = [topic_asset(ORDERS), topic_check(ORDERS)]

    def verdict(**kwargs):
        result = dg.materialize(run, resources=resources, instance=instance, **kwargs)
        [check] = result.get_asset_check_evaluations()
        return check, check.metadata["validated"].value

    check, validated = verdict()
    first = check.metadata["table_version"].value
    assert check.passed and validated == "the whole table"
    land("orders", "late.ndjson", [order("o8", "u-000002", [("p1", 1, 5.0)], 30)])
    check, validated = verdict()
    assert check.passed and validated == f"rows added since version {first}, which passed"
    assert check.metadata["expectations"].value > 0

    log = shop_lake.read(shop_lake.snapshot(ORDERS.path))  # a copy of a checked offset
    shop_lake.write(shop_lake.snapshot(ORDERS.path), log.limit(1))
    check, validated = verdict(raise_on_error=False)
    assert not check.passed and validated.startswith("rows added since version")
    assert check.metadata["failed_expectations"].value == ["expect_no_unexpected_rows"]
    check, validated = verdict(raise_on_error=False)  # after a failure: all of it again
    assert not check.passed and validated == "the whole table"
    assert check.metadata["failed_expectations"].value == ["expect_no_unexpected_rows"]
    assert check.metadata["unexpected_count"].value == 1  # the copy, next to its original


def test_great_expectations_is_imported_in_the_background_once():
    """The ingest step starts it (`preload_checks`), so the checks that follow need not wait
    seconds for the import; a fresh process shows it, as a run worker is one. Neither the
    check assets nor the scope of a check (what it validates, maybe nothing) import it."""
    script = (
        "import sys\n"
        "from lakelog.assets.quality import preload_checks\n"
        "import lakelog.assets.topics, lakelog.quality.scope\n"
        "assert 'great_expectations' not in sys.modules\n"
        # Loaded with the code location, not beside the step threads (see assets/quality.py).
        "assert 'sqlalchemy.orm' in sys.modules\n"
        "thread = preload_checks()\n"
        "assert preload_checks() is thread and thread.daemon\n"
        "thread.join(300)\n"
        "assert 'great_expectations' in sys.modules and 'lakelog.quality.validate' in sys.modules\n"
        "print('preloaded')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("preloaded")


def test_the_ingest_step_preloads_the_checks_when_they_follow(lake, land, resources, monkeypatch):
    topic = TOPICS["orders"]
    land("orders", "2026-01-05/a.ndjson", [order("o1", "u1", [("p1", 1, 10.0)], second=1)])
    monkeypatch.setattr(quality, "_PRELOAD", [])
    assert dg.materialize([topic_asset(topic)], resources=resources).success
    assert not quality._PRELOAD  # no check in this run: no import of GX either

    land("orders", "2026-01-05/b.ndjson", [order("o2", "u1", [("p1", 1, 10.0)], second=2)])
    instance = dg.DagsterInstance.ephemeral()  # the check's history: what it passed at
    result = dg.materialize([topic_asset(topic), topic_check(topic)], resources=resources,
                            instance=instance)
    assert result.success and quality._PRELOAD
    assert quality._PRELOAD[0].name == "lakelog-preload-gx"

    # Nothing new landed: the check has nothing to validate, and the ingest step does not
    # start the import for it (`test_quality_scope` shows the check itself imports none).
    monkeypatch.setattr(quality, "_PRELOAD", [])
    result = dg.materialize([topic_asset(topic), topic_check(topic)], resources=resources,
                            instance=instance)
    assert result.success and not quality._PRELOAD
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.passed and evaluation.description.startswith("nothing to validate")

    # A check of another asset of the run counts too, as a SQL model's warnings (part of the
    # model's step) do in `lakelog demo`'s last run; a check GX does not evaluate does not.
    def downstream(check: str) -> dg.AssetsDefinition:
        @dg.asset(key=["views", "checked_downstream"], deps=[topic_key(topic)],
                  check_specs=[dg.AssetCheckSpec(check, asset=["views", "checked_downstream"])])
        def checked_downstream():
            yield dg.MaterializeResult()
            yield dg.AssetCheckResult(passed=True)

        return checked_downstream

    for second, (check, selection, preloads) in enumerate([
        (names.VALUE_RANGES, None, True),
        (names.VALUE_RANGES, [topic_key(topic)], False),  # the checked asset is not in the run
        ("replay_matches", None, False),
    ]):
        land("orders", f"2026-01-05/c{second}.ndjson",
             [order(f"o{3 + second}", "u1", [("p1", 1, 10.0)], second=3 + second)])
        monkeypatch.setattr(quality, "_PRELOAD", [])
        assert dg.materialize([topic_asset(topic), downstream(check)], resources=resources,
                              selection=selection).success
        assert bool(quality._PRELOAD) is preloads, (check, selection)
    # With nothing new to ingest, only a check that validates its whole table every run (a
    # compacted or history table's) has the import started.
    for check, preloads in [(names.VALUE_RANGES, False), (names.COMPACTED_CHECK, True)]:
        monkeypatch.setattr(quality, "_PRELOAD", [])
        assert dg.materialize([topic_asset(topic), downstream(check)],
                              resources=resources).success
        assert bool(quality._PRELOAD) is preloads, check
