"""Change streams out: a keyed table lakelog keeps, published as a changelog topic.

DDIA's "API support for change streams": a derived table is itself a source others can
subscribe to. `ChangeStream` declares one for a keyed table (a compacted table, a keyed stream);
`publish_changes` appends the table's changes since the last publication to the topic
``changes.<path with dots>`` as Debezium envelopes — ``before``, ``after``, ``op`` (``r`` for the
first publication's snapshot of the rows, then ``c``, ``u``, ``d``), ``ts_ms`` (the table commit's
time) and ``source`` (``table``: the table's path, ``txId``, ``lsn`` and ``commit_lsn``: the
table version of the change). The topic is a changelog topic like a captured database's
(`lakelog.cdc.changelog.changelog_topic`): compacted, keyed by the table's key, ordered per key by
table version, so any consumer — a `CompactedTable` that mirrors the table, lakelog's own joins,
or an outside reader of the Delta table — subscribes to it like to any topic.

Only the table's own columns are published (lakelog's bookkeeping columns, named ``_…``, are
not), and a row that differs from its predecessor in those only is no change. A compacted
table's tombstone is a delete; the later purge of the tombstone is no change.

Exactly once, as the cart orders' relay: the publication appends the changes of versions
``(cursor, V]`` in one commit that records ``V`` as the application transaction
``(lakelog.changes:<path>, V)`` of the topic. A crash before it published nothing; a relay that
lost a race to another finds the version committed and publishes nothing. The changes of a
version must still be readable (`lakelog.lake.changes`): a vacuum of the table's removed files
before their version is published, or a table recreated under a new id (a rebuild), stops the
stream with a `ChangeStreamError` that says so, rather than publishing a wrong history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.cdc.changelog import SOURCE, changelog_topic
from lakelog.consumers import Output, Role
from lakelog.errors import ChangesUnavailableError, ConfigError, LakelogError
from lakelog.lake import AppTxn, Lake, Snapshot, held_read
from lakelog.log.offsets import append
from lakelog.log.topics import Topic
from lakelog.spark import literals

METADATA_KEY = "lakelog.changeStream"
ORDER_BY = ("_version", "_key")
#: The most rows of a feed read here that are handed to Spark as local rows (in the plan, which
#: over Spark Connect travels in the request); a larger feed is Spark's to read.
HELD_FEED_ROWS = 50_000


class ChangeStreamError(LakelogError):
    """A table's change stream cannot continue (its history was vacuumed or it was recreated)."""


@dataclass(frozen=True)
class ChangeStream:
    """The change stream of `table`, a keyed output of some consumer of the pipeline."""

    table: Output
    partitions: int = 4

    def __post_init__(self) -> None:
        if not self.table.keys:
            raise ConfigError(f"change stream of {self.table.path}: the table has no keys, so "
                              "its changes cannot be told apart per row")

    @property
    def path(self) -> str:
        return self.table.path

    @cached_property
    def row(self) -> T.StructType:
        """The published columns: the table's own, not lakelog's bookkeeping ones (``_…``)."""
        return T.StructType([f for f in self.table.schema.fields if not f.name.startswith("_")])

    @cached_property
    def topic(self) -> Topic:
        return changelog_topic(self.path, self.row, self.table.keys, partitions=self.partitions,
                               name="changes." + self.path.replace("/", "."))

    @property
    def app_id(self) -> str:
        return f"lakelog.changes:{self.path}"


@dataclass(frozen=True)
class PublishedChanges:
    changes: int
    #: The table versions published, ``(first, last)``; None if there was nothing to publish.
    versions: tuple[int, int] | None = None
    snapshot: bool = False  # whether this was the first publication (``op = r``)
    topic_version: int | None = None


def published_through(lake: Lake, stream: ChangeStream) -> int | None:
    """The last table version whose changes are in the topic (None: nothing published yet)."""
    if not lake.exists(stream.topic.path):
        return None
    return lake.snapshot(stream.topic.path).txn_version(stream.app_id)


def table_version(lake: Lake, stream: ChangeStream) -> int | None:
    """The table's latest version (None while it does not exist), from its Delta log."""
    return lake.snapshot(stream.path).version if lake.exists(stream.path) else None


def publish_changes(lake: Lake, stream: ChangeStream, *, now: datetime) -> PublishedChanges:
    """Append the table's changes since the last publication to its topic, as one commit."""
    if not lake.exists(stream.path):
        return PublishedChanges(0)
    table = lake.snapshot(stream.path)

    published = published_through(lake, stream)
    if published is not None and published >= table.version:
        return PublishedChanges(0)
    # The change feed since the publication found now, read here when its files are few (then
    # its rows are counted, and so few events are appended by pyarrow, not a Spark write).
    feed = None if published is None else _feed(lake, stream, table, published + 1, here=True)
    if published is None:  # the first publication: at most a row per stored row (version)
        rows_hint = sum(f.num_records for f in table.files())
    else:  # at most an event per changed row
        rows_hint = feed[1]

    def prepare(log: Snapshot) -> tuple[DataFrame, dict[str, Any]]:
        done = log.txn_version(stream.app_id)
        _check_same_table(lake, stream, table)
        if done is None:
            rows, first = _snapshot_events(lake, stream, table, now=now), table.version
        else:  # another relay may have published since `feed` was read
            changes = feed if done == published else _feed(lake, stream, table, done + 1)
            rows, first = _change_events(stream, changes[0]), done + 1
        return _envelopes(rows, stream, now=now), {METADATA_KEY: {
            "table": stream.path, "table_id": table.table_id, "first_version": first,
            "last_version": table.version, "snapshot": done is None}}

    done = append(lake, stream.topic, prepare, order_by=ORDER_BY,
                  txns=[AppTxn(stream.app_id, table.version)], rows_hint=rows_hint)
    if done is None:  # another relay published through this version first
        return PublishedChanges(0)
    result, metadata = done
    info = metadata[METADATA_KEY]
    return PublishedChanges(result.records, (info["first_version"], table.version),
                            info["snapshot"], result.version)


def _check_same_table(lake: Lake, stream: ChangeStream, table: Snapshot) -> None:
    """The stream continues the table it began on: not one recreated since (a new table id)."""
    for entry in lake.history(stream.topic.path, limit=50):
        published = entry.get(METADATA_KEY)
        if isinstance(published, dict):
            if published.get("table_id") != table.table_id:
                raise ChangeStreamError(
                    f"{stream.path} was recreated (a new table id) since its change stream "
                    f"{stream.topic.name} published version {published.get('last_version')}: "
                    "its history restarted, so the stream cannot continue it")
            return


def _own(df: DataFrame, stream: ChangeStream) -> DataFrame:
    """Rows that exist for a reader: a compacted table's tombstones do not."""
    if stream.table.role is Role.COMPACTED:
        df = df.where(~F.coalesce(F.col("_deleted"), F.lit(False)))
    return df


def _row(stream: ChangeStream) -> Column:
    return F.struct(*[F.col(f.name) for f in stream.row.fields])


def _snapshot_events(lake: Lake, stream: ChangeStream, table: Snapshot, *, now: datetime
                     ) -> DataFrame:
    """Every current row as a snapshot read (``op = r``) at the table's version, read `now`."""
    rows = _own(lake.read(table), stream)
    return rows.select(
        F.lit(None).cast(stream.row).alias("before"), _row(stream).alias("after"),
        F.lit("r").alias("op"), F.lit(table.version).cast("long").alias("_version"),
        literals.timestamp(now).alias("_time"),
    )


def _feed(
    lake: Lake, stream: ChangeStream, table: Snapshot, first: int, *, here: bool = False
) -> tuple[DataFrame, int | None]:
    """The table's change feed from version `first` through `table`'s, and its row count when
    it was read here (`here`, `Lake.changes_arrow` could, and the rows are few enough to hand
    to Spark as local rows: a larger feed is Spark's to read)."""
    try:
        held = lake.changes_arrow(stream.path, first, table.version) if here else None
        if held is None or held.num_rows > HELD_FEED_ROWS:
            return lake.changes(stream.path, first, table.version), None
    except ChangesUnavailableError as exc:
        raise ChangeStreamError(
            f"the change stream {stream.topic.name} is at version {first - 1} of {stream.path}, "
            f"but the table's changes since can no longer be read ({exc}); keep the table's "
            "vacuum retention longer than the time between publications") from exc
    schema = T.StructType([*table.schema.fields, T.StructField("_change_type", T.StringType()),
                           T.StructField("_commit_version", T.LongType()),
                           T.StructField("_commit_timestamp", T.TimestampType())])
    return held_read.frame(lake.spark, held, schema), held.num_rows


def _change_events(stream: ChangeStream, changes: DataFrame) -> DataFrame:
    """Per table version and key, the row before and after it: create, update or delete."""
    feed = _own(changes, stream)
    keys = list(stream.table.keys)

    def side(change: str, value: Column) -> Column:
        """The delete's (before) or insert's (after) part of a key's change in a version: at
        most one of each, so one pass over the feed pairs them (no join reading it twice)."""
        return F.first(F.when(F.col("_change_type") == change, value), ignorenulls=True)

    paired = feed.groupBy(*keys, F.col("_commit_version").alias("_version")).agg(
        side("delete", _row(stream)).alias("before"),
        side("insert", _row(stream)).alias("after"),
        side("delete", F.col("_commit_timestamp")).alias("_before_time"),
        side("insert", F.col("_commit_timestamp")).alias("_after_time"),
    )
    same = F.to_json(F.col("before")) == F.to_json(F.col("after"))
    op = (F.when(F.col("before").isNull(), "c").when(F.col("after").isNull(), "d")
          .otherwise("u"))
    return paired.where(~F.coalesce(same, F.lit(False))).select(
        "before", "after", op.alias("op"), "_version",
        F.coalesce("_after_time", "_before_time").alias("_time"),
    )


def _envelopes(events: DataFrame, stream: ChangeStream, *, now: datetime) -> DataFrame:
    """Events as topic records: the Debezium value, its derived columns and the envelope."""
    topic = stream.topic
    version = F.col("_version")
    ts_ms = F.unix_millis(F.col("_time"))
    source = F.struct(*[
        {"version": F.lit(None).cast("string"), "connector": F.lit("lakelog"),
         "name": F.lit(topic.name), "ts_ms": ts_ms,
         "snapshot": F.when(F.col("op") == "r", "true").otherwise("false"),
         "table": F.lit(stream.path), "txId": version, "lsn": version, "commit_lsn": version,
         }.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name)
        for f in SOURCE.fields
    ])
    value = events.select("before", "after", "op", ts_ms.alias("ts_ms"), source.alias("source"),
                          "_version")
    record = F.struct(*[F.col(f.name) for f in topic.schema.fields])
    derived = {d.name: d.expr(record).cast(d.type) for d in topic.derived}
    return value.select(
        derived[topic.key].alias("key"),
        derived[topic.event_id].alias("event_id"),
        derived[topic.time.event].alias("event_time"),
        *[(F.col(f.name) if f.name not in derived else derived[f.name]).alias(f.name)
          for f in topic.payload_fields],
        F.create_map(F.lit("source"), F.lit(stream.path)).alias("headers"),
        literals.timestamp(now).alias("ingest_time"),
        "_version", derived[topic.key].alias("_key"),
    )
