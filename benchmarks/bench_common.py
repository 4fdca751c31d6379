"""What benchmark scripts share: a classic ``local[2]`` session on a lake in a fresh temporary
folder, both gone afterwards."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from lakelog.lake import EmbeddedLake
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
