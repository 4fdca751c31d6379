"""Freeing a local checkpoint's rows when they are no longer read.

`DataFrame.localCheckpoint` keeps the rows in Spark's block manager as a persisted RDD, and the
frame's plan becomes a scan of that RDD. `DataFrame.unpersist` does not reach it: it uncaches a
query from the cache manager, and a local checkpoint is not one. Spark's cleaner frees the blocks
only after the JVM has collected the RDD; until then they hold memory, then spill to disk.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from lakelog.spark.session import over_connect


def free(df: DataFrame) -> None:
    """Free the rows of `df`, a local checkpoint that nothing will read again (a later query of
    it fails: Spark cannot compute the rows again).

    In a session of this process's own, the checkpoint's RDD is unpersisted now. Over Spark
    Connect the client cannot reach it: pyspark asks the server to drop the frame once the last
    reference to it goes (`CachedRemoteRelation.__del__`), and the server's cleaner frees the
    blocks after its JVM collects them.
    """
    if over_connect(df):
        return
    plan = df._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() == "LogicalRDD":  # a checkpoint's plan: a scan of its RDD
        plan.rdd().unpersist(False)
