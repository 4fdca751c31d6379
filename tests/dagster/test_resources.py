"""The Spark and Lake resources: engine settings always applied, the lake root resolved late."""

from __future__ import annotations

import dagster as dg
import pytest

from lakelog.resources import LakeResource, SparkResource, build_resources


def test_lake_root_comes_from_lakelog_home_when_opened(monkeypatch, tmp_path):
    resource = LakeResource(spark=SparkResource())
    monkeypatch.delenv("LAKELOG_HOME", raising=False)
    assert resource.resolved_root() == "./.lakelog"

    monkeypatch.setenv("LAKELOG_HOME", str(tmp_path / "home"))  # set after the resource was built
    assert resource.resolved_root() == str(tmp_path / "home")
    assert LakeResource(spark=SparkResource(), root="/data/lake").resolved_root() == "/data/lake"


def test_lake_root_as_env_var_opens_that_lake(spark_resource, monkeypatch, tmp_path):
    monkeypatch.setenv("LAKELOG_TEST_ROOT", str(tmp_path / "from-env"))
    session = spark_resource

    @dg.asset
    def where(lake: LakeResource) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"root": lake.open().root})

    result = dg.materialize(
        [where],
        resources={"lake": LakeResource(spark=session, root=dg.EnvVar("LAKELOG_TEST_ROOT"))},
    )

    [event] = result.get_asset_materialization_events()
    assert event.materialization.metadata["root"].value == str(tmp_path / "from-env")


def test_spark_session_always_gets_the_required_settings(spark, spark_resource):
    resource = SparkResource(
        master=spark_resource.master, remote=spark_resource.remote,
        conf={"spark.sql.session.timeZone": "Europe/Paris", "spark.sql.shuffle.partitions": "3",
              "spark.sql.codegen.wholeStage": "true"},
    )
    # lakelog's sessions generate no code (docs/spark.md); a run's resource can turn it back on
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "false"
    assert spark.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
    try:
        session = resource.session()
        assert session is spark  # getOrCreate reuses the running session
        assert session.conf.get("spark.sql.session.timeZone") == "UTC"  # REQUIRED_CONF wins
        assert session.conf.get("spark.sql.shuffle.partitions") == "3"
        assert session.conf.get("spark.sql.codegen.wholeStage") == "true"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        spark.conf.set("spark.sql.codegen.wholeStage", "false")


@pytest.mark.parametrize("environment", ["local", "spark_connect"])
def test_environments_share_one_spark_resource(environment):
    resources = build_resources(environment)
    assert set(resources) == {"spark", "lake", "source"}
    assert resources["lake"].spark is resources["spark"]
    assert resources["source"].dsn is None  # $LAKELOG_SOURCE_DSN is read when a source opens
    assert (resources["spark"].remote is None) == (environment == "local")
