"""A real Spark cluster: a standalone master and one worker from pyspark's own distribution, the
local Spark Connect server attached to it, and `lakelog demo` and a `dagster` run on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from deltalake import DeltaTable
from processes import TEST_ARCHIVES, free_port, stop_group

from lakelog.spark.server import ServerConfig, listening_sockets, stop

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


def daemon(name: str, args: list[str], log: Path) -> subprocess.Popen:
    """A master or worker JVM on loopback, in a process group of its own."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    with open(log, "wb") as out:
        return subprocess.Popen([str(SPARK_CLASS), f"org.apache.spark.deploy.{name}", *args],
                                env=env, stdout=out, stderr=out, start_new_session=True)


def wait_for(predicate, what: str, seconds: float = 120) -> None:
    """Poll `predicate` until it holds: a liveness wait, not a speed check."""
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[dict[str, str], Path]]:
    """(environment, folder): a master, a worker (2 cores, 2 GB) and the server on the master."""
    folder = tmp_path_factory.mktemp("cluster")
    port = free_port()
    master = daemon("master.Master", ["--host", "127.0.0.1", "--port", str(port),
                                      "--webui-port", str(free_port())], folder / "master.log")
    worker = None
    try:
        wait_for(lambda: "ALIVE" in (folder / "master.log").read_text(), "the master")
        worker = daemon("worker.Worker", [
            f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores", "2", "--memory", "2g",
            "--webui-port", str(free_port()), "--work-dir", str(folder / "work"),
        ], folder / "worker.log")
        wait_for(lambda: "Successfully registered with master" in
                 (folder / "worker.log").read_text(), "the worker")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_SPARK")}
        env.update({
            "LAKELOG_SPARK_SERVER_PORT": str(free_port()),
            "LAKELOG_SPARK_SERVER_MASTER": f"spark://127.0.0.1:{port}",
            "LAKELOG_SPARK_SERVER_MEMORY": "1g",
            "LAKELOG_SPARK_SERVER_DIR": str(folder / "server"),
            "LAKELOG_SPARK_SERVER_CLASS_ARCHIVES": str(TEST_ARCHIVES),
        })
        try:
            yield env, folder
        finally:
            stop(ServerConfig.from_environment(env))
    finally:
        for process in (worker, master):
            if process is not None:
                stop_group(process, timeout=60)


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_demo_and_a_dagster_run_on_a_standalone_cluster(cluster, tmp_path):
    env, folder = cluster
    home = tmp_path / "lake"
    lakelog = [sys.executable, "-m", "lakelog.cli"]
    summary = json.loads(run([*lakelog, "demo", "--events", "1000", "--batches", "1",
                              "--no-source", "--no-streams", "--json", "--home", str(home)],
                             env).stdout)
    assert summary["appended"] > 900 and all(lag == 0 for lag in summary["lag"].values())

    # The server runs its application on the cluster: the worker launched its executor.
    assert "Asked to launch executor" in (folder / "worker.log").read_text()
    config = ServerConfig.from_environment(env)
    server_pid = int(config.file("pid").read_text())
    assert {address for address, _ in listening_sockets(server_pid)} == {"127.0.0.1"}

    head = DeltaTable(str(home / "log" / "page_views")).to_pyarrow_table().num_rows
    landing = home / "landing" / "page_views" / "extra.ndjson"
    landing.write_text("".join(json.dumps({
        "event_id": f"cluster-{i}", "user_id": "u1", "session_id": "s1", "page": "product",
        "product_id": "P0001", "device_time": "2026-01-05T08:00:00Z",
        "sent_time": "2026-01-05T08:00:01Z", "received_time": "2026-01-05T08:00:01Z",
    }) + "\n" for i in range(3)))
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    run([sys.executable, "-m", "dagster", "asset", "materialize", "-m", "lakelog.assets.definitions",
         "--select", "log/page_views,streams/product_stats"],
        {**env, "DAGSTER_HOME": str(dagster_home), "LAKELOG_HOME": str(home)})

    assert DeltaTable(str(home / "log" / "page_views")).to_pyarrow_table().num_rows == head + 3
    lag = json.loads(run([*lakelog, "lag", "product_stats", "--json", "--home", str(home)],
                         env).stdout)
    assert lag and all(row["lag"] == 0 for row in lag)
