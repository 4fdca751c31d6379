"""Compacted tables: the current row per primary key of a changelog topic (DESIGN data model).

``tables/<name>`` is maintained by a consumer of the changelog, by default one copy-on-write
upsert per microbatch: the batch's latest change per key replaces the stored row only if its position is
newer, so out-of-order, replayed and duplicated change events are harmless. A delete leaves a
tombstone (the key, ``_deleted`` true) that keeps an older, late change from resurrecting the row;
`purge_tombstones` removes tombstones older than the table's tombstone retention (after that, as
with Kafka's ``delete.retention.ms``, a change older than the delete arriving late would be
applied). Files are clustered by key range, so a batch rewrites only the files its keys fall in.

That costs what the touched files hold, which for changes spread over all keys is the whole
table. With ``merge_on_read`` the table is instead a merge-on-read table
(`lakelog.lake.merge_on_read`): a batch appends its latest rows as new versions (the newest
position wins when read), and the maintenance job's `squash_table` compacts the versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from lakelog.cdc.changelog import META, ChangelogTable, change_rows
from lakelog.consumers import BatchInput, Output, Role
from lakelog.lake import Lake
from lakelog.lake.merge_on_read import merge_keys, overlap_groups
from lakelog.lake.squash import SquashResult, squash
from lakelog.lake.upsert import write_clustered
from lakelog.spark import literals

@dataclass(frozen=True)
class CompactedTable(ChangelogTable):
    KIND = "compact"
    LABEL = "compacted table"

    tombstone_retention: timedelta = timedelta(days=1)
    merge_on_read: bool = False

    @property
    def path(self) -> str:
        return f"tables/{self.name}"

    @property
    def output(self) -> Output:
        schema = T.StructType([*self.row.fields, *META])
        return Output(self.path, schema, keys=self.key, newer_by="_position",
                      rows_per_file=self.rows_per_file, merge_on_read=self.merge_on_read,
                      role=Role.COMPACTED)

    def transform(self, batch: BatchInput) -> dict[str, DataFrame]:
        return {self.path: latest_rows(batch.records[self.topic.name], self.row, self.key)}


def latest_rows(changes: DataFrame, row: T.StructType, key: tuple[str, ...]) -> DataFrame:
    """Per key, the row its latest change (by position) leaves: ``after``, or a tombstone."""
    latest = changes.withColumn(
        "_rank", F.row_number().over(Window.partitionBy("pk").orderBy(F.desc("position")))
    ).where(F.col("_rank") == 1)
    return change_rows(latest, row, key)


def live_rows(lake: Lake, table: CompactedTable) -> DataFrame:
    """The table's current rows without tombstones and lakelog's columns: the source's view."""
    df = lake.read(lake.snapshot(table.path))
    return df.where(~F.col("_deleted")).select(*table.row.fieldNames())


def purge_tombstones(lake: Lake, table: CompactedTable, *, now: datetime) -> int:
    """Remove tombstones committed before ``now - tombstone_retention``; how many were removed.

    Only files whose statistics say they hold rows committed before the cutoff are read, and
    only if they hold such a tombstone are they rewritten, in one commit. Of a merge-on-read
    table, only files that overlap no other file's keys qualify (elsewhere an older version of
    the key could outlive its tombstone): `squash_table` drops the tombstones of the others.
    """
    if not lake.exists(table.path):
        return 0
    snapshot = lake.snapshot(table.path)
    cutoff = now - table.tombstone_retention
    files = snapshot.files()
    if merge_keys(snapshot.properties) is not None:
        files = [g[0] for g in overlap_groups(files, table.key[0]) if len(g) == 1]
    files = [f for f in files if f.overlaps("_commit_time", None, cutoff)]
    if not files:
        return 0
    rows = lake.read(snapshot, files=files, all_versions=True)
    expired = expired_tombstones(table, now)
    counts = rows.agg(F.count("*").alias("all"), F.count(F.when(expired, 1)).alias("gone")).first()
    if not counts["gone"]:
        return 0
    write_clustered(lake, snapshot, rows.where(~expired), keys=table.key,
                    rows_per_file=table.rows_per_file, rows=counts["all"] - counts["gone"],
                    remove=files, metadata={"lakelog.purge_tombstones": {
                        "removed": counts["gone"], "cutoff": cutoff.isoformat()}})
    return counts["gone"]


def expired_tombstones(table: CompactedTable, now: datetime) -> Column:
    """Tombstones committed before ``now - tombstone_retention`` (never null)."""
    cutoff = literals.timestamp(now - table.tombstone_retention)
    return F.col("_deleted") & F.coalesce(F.col("_commit_time") < cutoff, F.lit(False))


def squash_table(lake: Lake, table: CompactedTable, *, now: datetime) -> SquashResult:
    """Squash merge-on-read `table` (`lakelog.lake.squash`), dropping its expired tombstones."""
    return squash(lake, table.path, rows_per_file=table.rows_per_file,
                drop=lambda: expired_tombstones(table, now), declared=table.output.merge_keys)


def change_counts(lake: Lake, path: str, start_version: int, end_version: int) -> dict[str, int]:
    """Rows a compacted table's versions ``start..end`` upserted and tombstoned (from its change
    feed: a rewritten row that did not change is not counted)."""
    if end_version < start_version:
        return {"rows_upserted": 0, "rows_tombstoned": 0}
    held = lake.changes_arrow(path, start_version, end_version)
    if held is not None:  # a microbatch's few files: counted here, no Spark job
        written = held.filter(pc.equal(held["_change_type"], "insert"))["_deleted"]
        return {"rows_upserted": pc.sum(pc.invert(written)).as_py() or 0,
                "rows_tombstoned": pc.sum(written).as_py() or 0}
    written = lake.changes(path, start_version, end_version).where(
        F.col("_change_type") == "insert"
    )
    row = written.agg(
        F.count(F.when(~F.col("_deleted"), 1)).alias("up"),
        F.count(F.when(F.col("_deleted"), 1)).alias("tomb"),
    ).first()
    return {"rows_upserted": row["up"], "rows_tombstoned": row["tomb"]}
