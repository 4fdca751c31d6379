"""SQL models as Dagster assets: their graph at definitions load, runs with full refresh and
hourly partitions, and a model whose SQL Spark rejects."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import functions as F

from lakelog.assets.partitions import HOURLY
from lakelog.assets.executor import VALIDATION_TAG
from lakelog.assets.naming import CATCH_UP_TAG
from lakelog.assets.quality import PRIORITY_TAG, quality_checks
from lakelog.assets.views import lakelog_tables, view_definitions
from lakelog.demo.pipeline import MODELS_DIR
from lakelog.demo.shop import CONSUMERS, TOPICS
from lakelog.demo.shop_cdc import SHOP
from lakelog.log.offsets import append
from lakelog.quality import names
from lakelog.resources import build_resources
from lakelog.views import ModelError

MODELS = Path(__file__).parents[2] / "dbt_like_views"
TABLES = {
    **lakelog_tables({**TOPICS, **SHOP.changelogs}, {**CONSUMERS, **SHOP.consumers}),
    "streams/search_clicks": dg.AssetKey(["streams", "search_clicks"]),
}


def key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["views", name])


def test_every_model_is_an_asset_depending_on_its_refs():
    assets = {a.key: a for a in view_definitions(MODELS, TABLES)}
    assert MODELS_DIR == MODELS  # the demo pipeline's models
    funnel = assets[key("product_funnel_hourly")]
    assert set(funnel.asset_deps[funnel.key]) == {
        dg.AssetKey(["log", t]) for t in ("page_views", "cart_events", "orders")
    }
    assert funnel.partitions_def == HOURLY
    assert funnel.group_names_by_key[funnel.key] == "funnel"
    description = funnel.specs_by_key[funnel.key].description
    assert "incremental model" in description and "```sql" in description
    assert "FROM {{ ref('log/orders') }} LATERAL VIEW explode(items) AS item" in description
    assert {c.name for c in funnel.check_specs} == {
        names.VALUE_RANGES, names.ROW_COUNT_CHANGE, names.UNIQUE_KEY,
    }
    assert not any(c.blocking for c in funnel.check_specs)

    top = assets[key("top_products_last_hour")]
    assert set(top.asset_deps[top.key]) == {key("product_funnel_hourly")}
    assert top.partitions_def is None
    clv = assets[key("customer_lifetime_value")]
    assert set(clv.asset_deps[clv.key]) == {dg.AssetKey(["log", "orders"]),
                                            dg.AssetKey(["tables", "customers"])}
    inventory = assets[key("inventory_remaining")]
    assert inventory.specs_by_key[inventory.key].kinds == {"spark"}  # a view stores nothing
    assert {a.group_names_by_key[k] for a in assets.values() for k in a.keys} == {
        "funnel", "products", "customers", "search", "inventory",
    }

    checks = quality_checks(TOPICS, [SHOP])
    defs = dg.Definitions(assets=list(assets.values()), asset_checks=checks,
                          resources=build_resources("local"))
    defs.resolve_all_job_defs()  # the models and checks form one valid asset graph
    specs = {s.asset_key.to_user_string(): s for c in checks for s in c.check_specs}
    assert specs["log/orders"].name == names.TOPIC_CHECK
    assert specs["log/cdc.customers"].name == names.TOPIC_CHECK
    assert specs["tables/customers"].name == names.COMPACTED_CHECK
    assert specs["history/customers"].name == names.HISTORY_CHECK
    assert len(specs) == len(TOPICS) + 3 * len(SHOP.tables)
    # A step per topic, one for the tables; validations go first and one at a time.
    assert [c.node_def.name for c in checks] == [
        *(f"log__{t.replace('.', '_')}_log_integrity" for t in (*TOPICS, *SHOP.changelogs)),
        "table_checks"]
    assert all(c.node_def.tags == {VALIDATION_TAG: "great_expectations", PRIORITY_TAG: "1"}
               for c in checks)
    assert all(s.blocking for s in specs.values())


def test_a_bad_model_fails_definitions_load_naming_its_file(tmp_path):
    (tmp_path / "a.sql").write_text("SELECT * FROM {{ ref('b') }}")
    (tmp_path / "b.sql").write_text("SELECT * FROM {{ ref('log/nowhere') }}")
    with pytest.raises(ModelError, match=f"^{tmp_path / 'b.sql'}: unknown ref 'log/nowhere'"):
        view_definitions(tmp_path, TABLES)


def test_partitioned_runs_full_refresh_and_spark_errors(shop_lake, resources, tmp_path):
    (tmp_path / "hourly").mkdir()
    (tmp_path / "hourly" / "views_hourly.sql").write_text(
        "{{ config(materialized='incremental', unique_key=['hour', 'product_id'],"
        " partition_by='hour') }}\n"
        "SELECT date_trunc('HOUR', event_time) AS hour, product_id, count(*) AS views\n"
        "FROM {{ ref('log/page_views') }} WHERE product_id IS NOT NULL GROUP BY 1, 2"
    )
    (tmp_path / "broken.sql").write_text(
        "{{ config(materialized='table') }}\nSELECT no_such_column FROM {{ ref('log/orders') }}"
    )
    assets = {a.key: a for a in view_definitions(tmp_path, TABLES)}
    hourly = [assets[key("views_hourly")]]
    hour = "2026-01-05-08:00"

    def metadata(result):
        [event] = result.get_asset_materialization_events()
        return {k: v.value for k, v in event.materialization.metadata.items()}

    first = metadata(dg.materialize(hourly, resources=resources, partition_key=hour))
    assert (first["mode"], first["reason"], first["dagster/row_count"]) == ("full", "first run", 2)

    late = shop_lake.read(shop_lake.snapshot("log/page_views")).where("event_id = 'v1'")
    append(shop_lake, TOPICS["page_views"], lambda snapshot: (
        late.drop("partition", "offset").withColumn("event_id", F.lit("v9")), {}
    ), order_by=["event_id"])
    second = metadata(dg.materialize(hourly, resources=resources, partition_key=hour))
    assert (second["mode"], second["touched"]) == ("incremental", 1)
    table = shop_lake.read(shop_lake.snapshot("views/views_hourly"))
    views = {r.product_id: r.views for r in table.collect()}
    assert views == {"p1": 3, "p2": 2}

    refresh = dg.RunConfig({"views__views_hourly": {"config": {"full_refresh": True}}})
    rebuilt = metadata(dg.materialize(hourly, resources=resources, partition_key=hour,
                                      run_config=refresh))
    assert (rebuilt["mode"], rebuilt["reason"]) == ("full", "full refresh requested")

    # An event of 09:00 arrives; the run for 08:00 recomputes 09:00 too and says so to Dagster.
    append(shop_lake, TOPICS["page_views"], lambda snapshot: (
        late.drop("partition", "offset").withColumns(
            {"event_id": F.lit("v10"), "event_time": F.col("event_time") + F.expr("INTERVAL 1 HOUR")}
        ), {}
    ), order_by=["event_id"])
    both = dg.materialize(hourly, resources=resources, partition_key=hour)
    events = both.get_asset_materialization_events()
    assert sorted(e.partition for e in events) == [hour, "2026-01-05-09:00"]

    failed = dg.materialize([assets[key("broken")]], resources=resources, raise_on_error=False)
    assert not failed.success
    [failure] = failed.get_step_failure_events()
    message = failure.step_failure_data.user_failure_data.description
    assert message.startswith(f"ModelRunError: {tmp_path / 'broken.sql'}: Spark could not run")
    assert "no_such_column" in message and "UNRESOLVED_COLUMN" in message


def test_a_model_whose_input_nothing_has_written_waits_and_skips_what_reads_it(
    shop_lake, resources, tmp_path
):
    """A catch-up run may select a consumer and a model reading its output, and the consumer have
    nothing to consume yet: the model waits (its step succeeds, says why, and materializes
    nothing) and the models reading it are skipped. A run asked for by hand fails, saying why."""
    (tmp_path / "clicked.sql").write_text(
        "{{ config(materialized='table') }}\n"
        "SELECT query, count(*) AS clicks FROM {{ ref('streams/search_clicks') }} GROUP BY query")
    (tmp_path / "top.sql").write_text(
        "{{ config(materialized='table') }}\nSELECT * FROM {{ ref('clicked') }} LIMIT 3")
    assets = view_definitions(tmp_path, TABLES)
    assert not shop_lake.exists("streams/search_clicks")

    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(assets, resources=resources, instance=instance,
                            tags={CATCH_UP_TAG: "true"})

    assert result.success and not result.get_asset_materialization_events()
    waits = [e.user_message for e in instance.all_logs(result.run_id)
             if e.step_key == "views__clicked" and e.dagster_event is None]  # its log lines
    assert any("model clicked waits: nothing has written streams/search_clicks" in m
               for m in waits), waits
    skipped = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SKIPPED"}
    assert skipped == {"views__top"}

    by_hand = dg.materialize(assets, resources=resources, raise_on_error=False)
    [failure] = by_hand.get_step_failure_events()
    assert "input streams/search_clicks does not exist yet; materialize it first" in (
        failure.step_failure_data.user_failure_data.description)


def test_a_run_on_unchanged_inputs_reports_the_checks_of_the_same_rows(
        shop_lake, resources, tmp_path):
    for name, materialized in (("per_user", "table"), ("per_user_view", "view")):
        (tmp_path / f"{name}.sql").write_text(
            f"{{{{ config(materialized='{materialized}', ranges={{'views': (0, 1)}}) }}}}\n"
            "SELECT user_id, count(*) AS views FROM {{ ref('log/page_views') }} GROUP BY user_id"
        )
    assets = view_definitions(tmp_path, TABLES)
    instance = dg.DagsterInstance.ephemeral()

    def run():
        result = dg.materialize(assets, resources=resources, instance=instance,
                            tags={CATCH_UP_TAG: "true"})
        modes = {e.asset_key.path[-1]: e.materialization.metadata["mode"].value
                 for e in result.get_asset_materialization_events()}
        checks = {c.asset_key.path[-1]: c for c in result.get_asset_check_evaluations()}
        return result.run_id, modes, checks

    first_run, modes, validated = run()
    assert modes == {"per_user": "full", "per_user_view": "view"}
    assert not any(c.passed for c in validated.values())  # a user viewed 2 pages
    assert not any("evaluated_by_run" in c.metadata for c in validated.values())
    _, modes, reported = run()
    assert modes == {"per_user": "unchanged", "per_user_view": "view"}
    for name, check in reported.items():
        assert (check.passed, check.description) == (False, validated[name].description)
        assert check.metadata["evaluated_by_run"].value == first_run

    late = shop_lake.read(shop_lake.snapshot("log/page_views")).limit(1)
    append(shop_lake, TOPICS["page_views"], lambda snapshot: (
        late.drop("partition", "offset").withColumn("event_id", F.lit("v99")), {}
    ), order_by=["event_id"])
    _, modes, revalidated = run()
    assert modes["per_user"] == "full"
    assert not any("evaluated_by_run" in c.metadata for c in revalidated.values())
