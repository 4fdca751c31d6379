"""What benchmark scripts share: a classic ``local[2]`` session on a lake in a fresh temporary
folder, both gone afterwards; Spark's own code generation, which lakelog's sessions turn off."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from typing import Any

from lakelog.lake import EmbeddedLake
from lakelog.procfs import stat_fields
from lakelog.spark.session import create_session


@contextmanager
def bench_lake(name: str) -> Iterator[EmbeddedLake]:
    spark = create_session(master="local[2]", app_name=name,
                           conf={"spark.sql.shuffle.partitions": "2"})
    root = tempfile.mkdtemp(prefix=f"{name}-")
    try:
        yield EmbeddedLake(spark, root)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


#: Spark's own code generation settings, which lakelog's sessions turn off (docs/spark.md).
SPARK_CODEGEN = {"spark.sql.codegen.wholeStage": "true",
                 "spark.sql.codegen.factoryMode": "FALLBACK"}


@contextmanager
def spark_codegen(spark: Any) -> Iterator[None]:
    """The session with Spark's own code generation for the block, its settings before after."""
    before = {key: spark.conf.get(key) for key in SPARK_CODEGEN}
    for key, value in SPARK_CODEGEN.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def cpu_seconds(pid: int | str) -> float:
    """CPU seconds (user and system) process `pid` has used, from ``/proc/<pid>/stat`` (a
    thread's: ``<pid>/task/<tid>``)."""
    fields = stat_fields(pid)
    if fields is None:
        raise ProcessLookupError(f"no process {pid}")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: The JVM threads `jvm_cpu_account` counts apart, by their name (``comm``): HotSpot's JIT
#: compiler threads (``C1 CompilerThre…``, ``C2 CompilerThre…``), the parallel collector's
#: workers (``GC Thread#…``; the VM thread, which runs the pauses' bookkeeping and the serial
#: collector, is left out) and Spark's task threads (``Executor task launch worker``s, which run
#: the queries' tasks in a local-mode driver).
THREAD_KINDS: dict[str, Callable[[str], bool]] = {
    "jit_cpu_s": lambda name: "CompilerThre" in name,
    "gc_cpu_s": lambda name: name.startswith("GC Thread"),
    "task_cpu_s": lambda name: name.startswith("Executor task"),
}


def jvm_cpu_account(pid: int) -> dict[str, float]:
    """CPU seconds (user and system) JVM `pid` has used: in all (``cpu_s``), and by each of
    `THREAD_KINDS`, from one walk over ``/proc/<pid>/task`` (threads that ended are not
    counted). The rest is the driver's own work: Spark Connect, analysis, planning,
    scheduling."""
    account = {"cpu_s": cpu_seconds(pid), **dict.fromkeys(THREAD_KINDS, 0.0)}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text()
            kind = next((k for k, named in THREAD_KINDS.items() if named(name)), None)
            if kind is not None:
                account[kind] += cpu_seconds(f"{pid}/task/{task.name}")
        except (OSError, ProcessLookupError):  # the thread ended
            continue
    return account


def bytecode() -> dict[str, Any]:
    """Whether the modules a lakelog process imports have compiled bytecode on disk (looked up
    without importing them). Without it (an install by uv without ``--compile-bytecode``, and
    ``PYTHONDONTWRITEBYTECODE`` set) every process compiles Dagster, pyspark and Great
    Expectations from source again: seconds each."""
    import importlib.util

    def cached(name: str) -> bool:
        spec = importlib.util.find_spec(name)
        return bool(spec and spec.origin
                    and os.path.exists(importlib.util.cache_from_source(spec.origin)))

    return {"site_packages": cached("dagster"), "lakelog": cached("lakelog"),
            "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", "")}


def free_port() -> int:
    """A free TCP port on loopback, for a server of the benchmark's own."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine_jiffies() -> tuple[int, int]:
    """The machine's CPU time so far, in clock ticks over all cores: (all, idle), from
    ``/proc/stat``; two readings give the share of the cores that were busy between them."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]  # idle and iowait


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the machine's cores busy between two `machine_jiffies` readings."""
    total, idle = after[0] - before[0], after[1] - before[1]
    return 1 - idle / total if total else 0.0
