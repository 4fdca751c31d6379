"""The local Spark server killed in the middle of a microbatch of a `dagster` run: the step is
retried on a new server, resumes the planned batch, and its output holds every record once."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from shop_records import SHOP_RECORDS, SHOP_TOTALS
from processes import free_port, subprocess_env

from lakelog import checkpoints
from lakelog.demo.shop import PRODUCT_STATS
from lakelog.lake import EmbeddedLake
from lakelog.spark.server import ServerConfig, status, stop

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


def test_a_server_killed_mid_batch_is_replaced_and_the_batch_finishes_once(
    shop_template, tmp_path
):
    home = tmp_path / "lake"
    shutil.copytree(shop_template, home)
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    marker = tmp_path / "killed"
    env = subprocess_env(  # a server of this test's own: it gets killed
        LAKELOG_SPARK_SERVER_PORT=str(free_port()), LAKELOG_SPARK_SERVER_DIR=str(tmp_path / "spark"),
        LAKELOG_SPARK_SERVER_MASTER="local[1]", LAKELOG_SPARK_SERVER_MEMORY="1g",
        LAKELOG_HOME=str(home), DAGSTER_HOME=str(dagster_home),
        LAKELOG_TEST_KILL_MARKER=str(marker),
    )
    server = ServerConfig.from_environment(env)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dagster", "asset", "materialize", "-f",
             str(HERE / "fault_defs.py"), "--select", PRODUCT_STATS.path],
            env=env, capture_output=True, text=True, timeout=900,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        killed = int(marker.read_text())
        assert "STEP_UP_FOR_RETRY" in done.stderr and "STEP_RESTARTED" in done.stderr
        replaced = status(server)
        assert replaced.healthy and replaced.pid != killed
    finally:
        stop(server)

    stats = DeltaTable(str(home / PRODUCT_STATS.path)).to_pyarrow_table().to_pylist()
    totals = {r["product_id"]: (r["views"], r["cart_adds"], r["cart_removes"], r["orders"],
                                r["units_sold"], r["revenue"]) for r in stats}
    assert totals == SHOP_TOTALS  # every record once: nothing lost, nothing doubled
    checkpoint = checkpoints.load(EmbeddedLake(lambda: None, str(home)), "product_stats")
    assert checkpoint.plan is None and sum(checkpoint.committed.values()) == SHOP_RECORDS
