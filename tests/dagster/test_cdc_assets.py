"""The captured shop database in Dagster: the pipeline sensor requests a capture, materializing
the CDC assets brings every table up to date, and the reconciliation check compares it with
the source."""

from __future__ import annotations

import os
import sqlite3

import dagster as dg
import pytest

from lakelog.assets.location import build_definitions
from lakelog.cdc.connect import sqlite_path
from lakelog.demo import oltp
from lakelog.demo.shop_cdc import SHOP
from lakelog.pipeline import Pipeline
from lakelog.resources import LakeResource, SourceResource
from test_automation import NoSpark


@pytest.fixture
def shop_db(lake, monkeypatch):
    monkeypatch.delenv("LAKELOG_SOURCE_DSN", raising=False)
    path = sqlite_path(lake.root, SHOP.server_name)

    os.makedirs(os.path.dirname(path))
    conn = sqlite3.connect(path)
    oltp.create_schema(conn, "sqlite")
    oltp.seed(conn, "sqlite", customers=30, products=20, seed=5)
    return conn


def test_pipeline_sensor_requests_a_capture_once_per_position(lake, shop_db):
    resources = {"spark": NoSpark(), "lake": LakeResource(spark=NoSpark(), root=lake.root),
                 "source": SourceResource()}
    defs = build_definitions(Pipeline("cdc", sources=[SHOP]), resources=resources)
    sensor = defs.resolve_sensor_def("pipeline")
    instance = dg.DagsterInstance.ephemeral()

    def tick(cursor):
        with dg.build_sensor_context(instance=instance, cursor=cursor,
                                     resources=resources) as context:
            return sensor(context)

    first = tick(None)
    [request] = first.run_requests
    selected = set(request.asset_selection)
    assert dg.AssetKey(["cdc", "shop"]) in selected  # no snapshot yet
    assert {dg.AssetKey(["log", "cdc.customers"]), dg.AssetKey(["tables", "customers"]),
            dg.AssetKey(["history", "inventory"])} <= selected  # and what it feeds
    assert "requested already" in tick(first.cursor).skip_reason.skip_message

    assert defs.resolve_job_def("capture_shop").execute_in_process(instance=instance).success
    [ingest] = tick(first.cursor).run_requests  # captured: its landing files are the news now
    assert dg.AssetKey(["cdc", "shop"]) not in ingest.asset_selection
    assert dg.AssetKey(["log", "cdc.customers"]) in ingest.asset_selection

    oltp.mutate(shop_db, "sqlite", n=5, seed=8, now=oltp.START)  # the source moved on
    [again] = tick(first.cursor).run_requests
    assert dg.AssetKey(["cdc", "shop"]) in again.asset_selection


def test_materializing_the_cdc_assets_mirrors_the_source(spark_resource, lake, shop_db):
    session = spark_resource
    resources = {"spark": session, "lake": LakeResource(spark=session, root=lake.root),
                 "source": SourceResource()}
    defs = build_definitions(Pipeline("cdc", sources=[SHOP], change_streams=["tables/customers"]),
                             resources=resources)
    job = defs.resolve_implicit_global_asset_job_def()
    changes = dg.AssetKey(["log", "changes.tables.customers"])

    oltp.mutate(shop_db, "sqlite", n=50, seed=8, now=oltp.START)
    result = job.execute_in_process(resources=resources)
    assert result.success

    [capture] = [e.materialization for e in result.get_asset_materialization_events()
                 if e.asset_key == dg.AssetKey(["cdc", "shop"])]
    meta = capture.metadata
    assert meta["snapshot_taken"].value is True and meta["lag_positions"].value == 0
    [tables] = [e.materialization for e in result.get_asset_materialization_events()
                if e.asset_key == dg.AssetKey(["tables", "customers"])]
    assert tables.metadata["rows_upserted"].value > 30  # the snapshot's 30 and more
    everything = lake.read(lake.snapshot("tables/customers"))
    assert tables.metadata["rows_tombstoned"].value == everything.where("_deleted").count()
    customers = shop_db.execute("SELECT count(*) FROM customers").fetchone()[0]
    table = lake.read(lake.snapshot("tables/customers")).where("NOT _deleted")
    assert table.count() == customers
    evaluations = result.get_asset_check_evaluations()
    assert all(e.passed for e in evaluations), evaluations  # quality checks pass too
    checks = {e.asset_key.path[-1]: e for e in evaluations if e.check_name == "matches_source"}
    assert set(checks) == {"customers", "products", "inventory"}
    # The customers table's change stream: its first publication is a snapshot of every row.
    [published] = [e.materialization for e in result.get_asset_materialization_events()
                   if e.asset_key == changes]
    assert published.metadata["snapshot"].value is True
    assert published.metadata["changes_published"].value == customers

    # The source changes: the sensor would capture; meanwhile the check warns, it does not fail.
    oltp.mutate(shop_db, "sqlite", n=10, seed=9, now=oltp.START)
    rerun = job.execute_in_process(resources=resources, asset_selection=[
        dg.AssetKey(["tables", "customers"]), dg.AssetKey(["history", "customers"])])
    [evaluation] = [
        e for e in rerun.get_asset_check_evaluations() if e.check_name == "matches_source"
    ]
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN

    # Capture and the customers' tables move on, nothing downstream of them: the sensor sees
    # the table's changes not yet in its change stream.
    assert job.execute_in_process(resources=resources, asset_selection=[
        dg.AssetKey(["cdc", "shop"]), dg.AssetKey(["log", "cdc.customers"]),
        dg.AssetKey(["tables", "customers"]), dg.AssetKey(["history", "customers"])]).success
    sensor = defs.resolve_sensor_def("pipeline")
    with dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(),
                                 resources=resources) as context:
        [request] = sensor(context).run_requests
    assert changes in request.asset_selection
