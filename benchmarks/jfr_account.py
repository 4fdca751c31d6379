"""Where a Spark JVM's own work goes, from Java Flight Recorder's execution samples.

`record` starts a recording in a running JVM (``jcmd <pid> JFR.start``, the ``profile``
settings, stacks 256 frames deep) and stops it when its block ends; `shares` reads the samples
back (``jfr print``) and puts each in the first category its stack matches (`CATEGORIES`, most
specific first): a query's analysis, optimization and planning, the Connect planner, its tasks
by kind, the scheduler. Only Java code is sampled: the JIT's compiler threads and the collector
are not in it (`bench_common.jvm_cpu_account` counts those).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: (category, a pattern of a frame in its samples' stacks), tried in this order.
CATEGORIES = (
    ("task: parquet write", r"parquet\.hadoop\.(ParquetWriter|InternalParquetRecordWriter)"
                            r"|ParquetOutputWriter|FileFormatDataWriter"),
    ("task: parquet read", r"parquet\.hadoop\.ParquetFileReader|parquet\.column\.impl"
                           r"|VectorizedParquetRecordReader|ParquetRowConverter"),
    ("task: json", r"catalyst\.json\.|JacksonParser|fasterxml\.jackson"),
    ("task: arrow and python", r"ArrowConverters|arrow\.vector|ArrowWriter|PythonRunner"),
    ("task: shuffle", r"\.shuffle\.|ShuffleBlockFetcherIterator"),
    ("task: other", r"org\.apache\.spark\.executor\.Executor\$TaskRunner"),
    ("plan description (explainString)", r"QueryExecution\.explainString"),
    ("analysis", r"catalyst\.analysis\.|CheckAnalysis"),
    ("optimization", r"catalyst\.optimizer\.|SparkOptimizer"),
    ("physical planning", r"QueryExecution\.(sparkPlan|executedPlan)|SparkStrategies"
                          r"|QueryPlanner|InsertAdaptiveSparkPlan|prepareForExecution"),
    ("connect planner", r"connect\.planner\.SparkConnectPlanner"),
    ("connect results", r"SparkConnectPlanExecution|ExecuteResponseObserver"),
    ("scheduler", r"DAGScheduler|TaskSchedulerImpl|TaskSetManager"),
    ("other", r"."),
)


def _tool(name: str) -> str:
    """A JDK tool: from ``$JAVA_HOME/bin``, else the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home, "bin", name)) if home else shutil.which(name)
    if not found or not Path(found).exists():
        raise FileNotFoundError(f"no {name} (a JDK's tool) in $JAVA_HOME/bin or on the PATH")
    return found


@contextmanager
def record(pid: int, path: Path) -> Iterator[Path]:
    """A flight recording of JVM `pid` for the block, written to `path`."""
    jcmd = _tool("jcmd")
    subprocess.run([jcmd, str(pid), "JFR.configure", "stackdepth=256"], check=True,
                   capture_output=True)
    subprocess.run([jcmd, str(pid), "JFR.start", "name=lakelog-bench", "settings=profile",
                    f"filename={path}"], check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run([jcmd, str(pid), "JFR.stop", "name=lakelog-bench"], check=True,
                       capture_output=True)


def samples(path: Path) -> Iterator[str]:
    """Each execution sample's stack, frames one per line (innermost first)."""
    printed = subprocess.run([_tool("jfr"), "print", "--events", "jdk.ExecutionSample",
                              "--stack-depth", "256", str(path)],
                             check=True, capture_output=True, text=True).stdout
    for event in printed.split("jdk.ExecutionSample")[1:]:
        yield "\n".join(line.strip() for line in event.splitlines() if "line:" in line)


def shares(path: Path) -> dict[str, object]:
    """The samples' count and each category's share of them (rounded to 0.001)."""
    patterns = [(name, re.compile(pattern)) for name, pattern in CATEGORIES]
    counts: Counter[str] = Counter()
    for stack in samples(path):
        counts[next(name for name, pattern in patterns if pattern.search(stack))] += 1
    total = sum(counts.values())
    return {"samples": total,
            "share": {name: round(counts[name] / total, 3) for name, _ in CATEGORIES
                      if counts[name]} if total else {}}
