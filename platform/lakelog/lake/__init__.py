"""Lake I/O: Delta tables read and written as Spark DataFrames.

`Lake` is the interface every caller uses; `EmbeddedLake` implements it with delta-rs commits
and Spark compute, so it needs no Delta jars on the Spark classpath.
"""

from lakelog.lake.base import AppTxn, CommitMetadata, DataFile, Lake, Snapshot, already_committed
from lakelog.lake.embedded import EmbeddedLake

__all__ = ["AppTxn", "CommitMetadata", "DataFile", "EmbeddedLake", "Lake", "Snapshot", "already_committed"]
