"""Faults under the real `dagster-daemon`: `kill -9` of a run worker, and separately of the local
Spark server, in the middle of a planned microbatch of a pipeline run the sensor launched. The
run (or its step) is retried, the retry resumes the planned batch, and the consumer's output
holds every record once: nothing lost, nothing doubled."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import NOT_FINISHED_STATUSES
from deltalake import DeltaTable
from instances import REPO, deploy_instance
from processes import free_port, stop_group, subprocess_env
from shop_records import SHOP_FILES, SHOP_RECORDS, SHOP_TOTALS, land_file

from lakelog.assets.launcher import PreforkRunLauncher
from lakelog.consumers import checkpoints
from lakelog.demo.shop import PRODUCT_STATS
from lakelog.lake import EmbeddedLake
from lakelog.spark.server import ServerConfig, status, stop

pytestmark = pytest.mark.slow

DAEMON = Path(sys.executable).with_name("dagster-daemon")
FAULTS = Path(__file__).with_name("fault_defs.py")


def no_spark():
    raise AssertionError("the test reads metadata only")


def run_daemon(tmp_path: Path, kill: str, **env: str) -> tuple[Path, dg.DagsterInstance]:
    """Run the daemon on `fault_defs.py` over the landed shop until product_stats has committed
    every record and every run has finished (a queued retry too: the sensor's next run may have
    finished the batch before it); the lake and the instance."""
    home = tmp_path / "lake"
    for (topic, name), records in SHOP_FILES.items():
        land_file(home, topic, name, records)
    dagster_home = deploy_instance(tmp_path / "dagster_home")
    lake = EmbeddedLake(no_spark, str(home))
    instance = dg.DagsterInstance.from_config(str(dagster_home))

    def settled() -> bool:
        if not (home / "_checkpoints" / "product_stats" / "_delta_log").exists():
            return False
        done = checkpoints.load(lake, "product_stats")
        busy = instance.get_run_records(dg.RunsFilter(statuses=NOT_FINISHED_STATUSES))
        return (done.plan is None and sum(done.committed.values()) == SHOP_RECORDS and not busy
                and not unretried(instance))

    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [str(DAEMON), "run", "-f", str(FAULTS)], cwd=REPO,
        env=subprocess_env(DAGSTER_HOME=str(dagster_home), LAKELOG_HOME=str(home),
                           LAKELOG_TEST_KILL=kill, **env),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 6 * 60  # a liveness bound, not a speed check
        while not settled() and time.monotonic() < deadline:
            assert daemon.poll() is None, "dagster-daemon exited"
            time.sleep(3)
    finally:
        stop_group(daemon, timeout=60)
        log.close()
    return home, instance


def unretried(instance: dg.DagsterInstance) -> list[str]:
    """Failed runs the daemon's run retries have not launched again yet: between a run's
    failure and its retry's launch, the sensor's next run may finish the batch and leave no
    run unfinished (CI saw the wait end there, with no retry to check)."""
    runs = instance.get_runs()
    parents = {r.tags.get("dagster/parent_run_id") for r in runs}
    return [r.run_id for r in runs
            if r.status == dg.DagsterRunStatus.FAILURE and r.run_id not in parents]


def assert_every_record_once(home: Path) -> None:
    stats = DeltaTable(str(home / PRODUCT_STATS.path)).to_pyarrow_table().to_pylist()
    totals = {r["product_id"]: (r["views"], r["cart_adds"], r["cart_removes"], r["orders"],
                                r["units_sold"], r["revenue"]) for r in stats}
    assert totals == SHOP_TOTALS  # every record once: nothing lost, nothing doubled
    views = DeltaTable(str(home / "log" / "page_views")).to_pyarrow_table()["event_id"].to_pylist()
    assert sorted(views) == ["v1", "v2", "v3", "v4", "v5"]


def events(instance: dg.DagsterInstance, run_id: str,
           kind: dg.DagsterEventType) -> list[str]:
    return [e.message or "" for e in instance.all_logs(run_id, of_type=kind)]


def runs_by(instance: dg.DagsterInstance, keep: Callable[[dg.DagsterRun], bool]) -> list:
    return [r.dagster_run for r in instance.get_run_records() if keep(r.dagster_run)]


def test_a_run_worker_killed_mid_batch_is_retried_and_the_batch_finishes_once(tmp_path):
    """The worker's supervisor (the prefork launcher of deploy/dagster.yaml) sees its run's
    process die and reports the run failed; the daemon's run retries launch it again."""
    marker = tmp_path / "killed"
    home, instance = run_daemon(tmp_path, "worker", LAKELOG_TEST_KILL_MARKER=str(marker))

    assert marker.exists(), "the run worker was never killed"
    crashed = runs_by(instance, lambda r: r.status == dg.DagsterRunStatus.FAILURE)
    assert len(crashed) == 1, [(r.run_id, r.status.value) for r in instance.get_runs()]
    worker = PreforkRunLauncher.worker_of(crashed[0])
    assert worker is not None and worker["pid"] == int(marker.read_text())
    assert any(f"Run worker process {worker['pid']}" in m and "SIGKILL" in m for m in
               events(instance, crashed[0].run_id, dg.DagsterEventType.ENGINE_EVENT))
    retries = runs_by(instance, lambda r: r.tags.get("dagster/parent_run_id") == crashed[0].run_id)
    assert [r.status for r in retries] == [dg.DagsterRunStatus.SUCCESS]
    assert_every_record_once(home)


def test_a_spark_server_killed_mid_batch_is_replaced_and_the_batch_finishes_once(tmp_path):
    """The step sees the server gone and asks for a retry; its retry starts a new server and
    resumes the planned batch, in the same run."""
    marker = tmp_path / "killed"
    env = {  # a server of this test's own: it gets killed
        "LAKELOG_SPARK_SERVER_PORT": str(free_port()),
        "LAKELOG_SPARK_SERVER_DIR": str(tmp_path / "spark"),
        "LAKELOG_SPARK_SERVER_MASTER": "local[1]", "LAKELOG_SPARK_SERVER_MEMORY": "1g",
        "LAKELOG_TEST_KILL_MARKER": str(marker),
    }
    server = ServerConfig.from_environment(env)
    try:
        home, instance = run_daemon(tmp_path, "server", **env)
        killed = int(marker.read_text())
        replaced = status(server)
        assert replaced.healthy and replaced.pid != killed
    finally:
        stop(server)

    runs = instance.get_runs()
    assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    retried = [r.run_id for r in runs
               if events(instance, r.run_id, dg.DagsterEventType.STEP_UP_FOR_RETRY)]
    assert len(retried) == 1
    assert events(instance, retried[0], dg.DagsterEventType.STEP_RESTARTED)
    assert_every_record_once(home)
    checkpoint = checkpoints.load(EmbeddedLake(no_spark, str(home)), "product_stats")
    assert checkpoint.plan is None and sum(checkpoint.committed.values()) == SHOP_RECORDS
