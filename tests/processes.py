"""What tests that start processes share: the test run's Spark Connect server, the environment
that points a subprocess at it, free ports for servers of a test's own, and stopping them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from lakelog.spark import class_archive
from lakelog.spark.server import ServerConfig, ensure_running, stop

_PORT = int(os.environ.get("LAKELOG_TEST_SPARK_PORT", "15102"))

#: The class-data sharing archives of the test runs' servers (not the user's own).
TEST_ARCHIVES = Path(tempfile.gettempdir()) / "lakelog-test-class-archives"
#: A lakelog-managed Connect server on a port and state folder of its own: two cores, 3 GB.
TEST_SERVER = ServerConfig(
    port=_PORT,
    master="local[2]",
    memory="3g",
    state_dir=Path(tempfile.gettempdir()) / f"lakelog-test-spark-{_PORT}",
    conf={"spark.sql.shuffle.partitions": "2"},
    class_archives=TEST_ARCHIVES,
)


def server_java_options(pid: int) -> str:
    """The ``spark.driver.extraJavaOptions=...`` argument of the server process `pid`."""
    return next(a for a in Path(f"/proc/{pid}/cmdline").read_text().split("\0")
                if a.startswith("spark.driver.extraJavaOptions="))


def free_port() -> int:
    """A free TCP port on loopback, for a server of a test's own."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def subprocess_env(**extra: str) -> dict[str, str]:
    """This environment for a CLI or `dagster` subprocess, its Spark the test Spark server.

    The subprocess finds no `--master`/`--remote` setting, so it uses the local server, as a
    user's would, and starts it if no other process of the test run has yet.
    """
    env = {k: v for k, v in os.environ.items()
           if k not in ("LAKELOG_SPARK_MASTER", "LAKELOG_SPARK_REMOTE")
           and not k.startswith("LAKELOG_SPARK_SERVER_")}
    return {
        **env,
        "LAKELOG_SPARK_SERVER_PORT": str(TEST_SERVER.port),
        "LAKELOG_SPARK_SERVER_MASTER": TEST_SERVER.master,
        "LAKELOG_SPARK_SERVER_MEMORY": TEST_SERVER.memory,
        "LAKELOG_SPARK_SERVER_DIR": str(TEST_SERVER.state_dir),
        "LAKELOG_SPARK_SERVER_CLASS_ARCHIVES": str(TEST_ARCHIVES),
        **extra,
    }


def stop_group(process: subprocess.Popen, *, timeout: float = 30) -> None:
    """SIGTERM to the process group `process` leads (started with start_new_session), then
    SIGKILL if it has not ended within `timeout` seconds."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def write_class_archive() -> Path | None:
    """Start and stop the test Spark server once, so that it writes the class archive of this
    installation (`lakelog.spark.class_archive`), if `TEST_ARCHIVES` has none; the archive
    written, else None. The server must not be running.

    Every server started without an archive loads its classes from the jars and writes an
    archive of ~200 MB as it stops; with one, it maps them (benchmarks/bench_class_archive.py,
    2 cores: 14.5 s to start and 19.1 s to stop without, 4.3 s and 0.6 s with). A new virtual
    environment (every CI run) has none, and a test run starts several servers at once (its
    own, and those of the tests of servers, faults and clusters): each would pay both, on two
    busy cores. The server ingests a few records here, as a user's first one does, so that the
    archive holds the classes of a log write too.
    """
    final = class_archive.archive(TEST_ARCHIVES)
    if final is None or final.exists():
        return None
    try:
        ensure_running(TEST_SERVER)
        with tempfile.TemporaryDirectory(prefix="lakelog-class-archive-") as folder:
            records = Path(folder, "views.ndjson")
            records.write_text("".join(json.dumps({
                "event_id": f"e{i}", "user_id": "u1", "session_id": "s1", "page": "product",
                "product_id": "P0001", "device_time": "2026-01-05T08:00:00.000Z",
                "sent_time": "2026-01-05T08:00:01.000Z",
                "received_time": "2026-01-05T08:00:01.200Z",
            }) + "\n" for i in range(5)))
            subprocess.run(
                [sys.executable, "-m", "lakelog.cli", "produce", "page_views", str(records),
                 "--home", str(Path(folder, "lake"))],
                env=subprocess_env(), capture_output=True, text=True, timeout=300, check=True)
    finally:
        stop(TEST_SERVER)
    return final if final.exists() else None
