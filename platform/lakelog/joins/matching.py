"""One microbatch of a window join as a DataFrame function (`lakelog.joins.window_join`).

Given the batch's records of both inputs, the buffer (the join's state) and the watermark
before and after the batch, in this order:

1. **De-duplicate** — a record delivered twice in the batch counts once, and a copy of a record
   that is still buffered is ignored. (A copy that arrives after its record left the buffer is
   older than the watermark, so step 2 reports it.)
2. **Late** — a record older than the watermark before the batch goes to the late table and
   is not joined; so does a record with a null key (it can match nothing) on a side whose
   unmatched records are not kept (the right of a left join, the left of a right join). On a
   kept side a null-key record matches nothing and is emitted unmatched when it closes.
3. **Match** — new left × (buffered right ∪ new right), and buffered left × new right. Buffered
   × buffered pairs were formed in the batch that brought the later of the two, so every pair
   is emitted exactly once, in the first batch that holds both records. A buffered record
   remembers in `_matched` whether it found a match (left records; right ones too where the
   join keeps unmatched right records).
4. **Close** — a left record whose window ends before the watermark after the batch
   (``left_time + within < watermark``) leaves the buffer; in a left or full join one that never
   matched is emitted unmatched now. No right record still to come can match it: it would be
   late.
5. **Expire** — a right record older than the watermark after the batch leaves the buffer: a
   left record that could still match it (``right_time - within <= left_time <= right_time``)
   would be late. In a right or full join one that never matched is emitted unmatched now.

All of it is one shuffle: buffered and new rows are partitioned by the join key, and within a
key each left row finds its right rows in the list of the key's right rows (the rows of one key
within one window are few). The result is computed once; the outputs are cut from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from typing import TYPE_CHECKING, Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from lakelog.joins.side import trailer
from lakelog.lake.one_partition import one_partition
from lakelog.log.records import record_json
from lakelog.spark import literals

if TYPE_CHECKING:
    from lakelog.joins.window_join import WindowJoin

Which = Literal["left", "right"]
BUFFER_KEY = ("_side", "_event_id")
#: Columns of a new record that only its late-table row needs.
_ORIGIN = (
    T.StructField("_partition", T.IntegerType()),
    T.StructField("_offset", T.LongType()),
    T.StructField("_record", T.StringType()),
)


def _key(name: str) -> str:
    return f"_key_{name}"


def buffer_schema(join: WindowJoin) -> T.StructType:
    """One row per buffered record of either input: the other input's columns are null, and
    `_matched` says whether a match was emitted (left records; right records where the join
    keeps unmatched ones)."""
    return T.StructType([
        T.StructField("_side", T.StringType()),
        T.StructField("_event_id", T.StringType()),
        T.StructField("_time", T.TimestampType()),
        *[T.StructField(_key(k), join.left.type_of(k)) for k in join.keys],
        T.StructField("_matched", T.BooleanType()),
        *join.left.fields,
        *join.right.fields,
    ])


@dataclass(frozen=True)
class Matches:
    joined: DataFrame  # output rows: matches, and the kept sides' unmatched records that closed
    late: DataFrame  # late-table rows
    buffered: DataFrame  # buffer rows to insert or replace
    expired: DataFrame  # buffer keys to delete


def match_batch(
    join: WindowJoin,
    left: DataFrame,
    right: DataFrame,
    buffer: DataFrame,
    *,
    before: datetime | None,
    after: datetime | None,
    batch: int,
    cache: Callable[[DataFrame], DataFrame] | None = None,
    together: bool = False,
) -> Matches:
    """The outputs of one batch: `left`/`right` are its records, `buffer` the state before it,
    `before`/`after` the watermark before and after it (None: no record seen yet). `cache`
    keeps the rows the outputs are cut from (`BatchInput.cached`); without it they are computed
    into a local checkpoint. With `together` (few rows: `BatchInput.few`) they are matched in
    one partition, without a shuffle."""
    keys = [_key(k) for k in join.keys]
    side = F.col("_side")
    new = F.col("_new")
    keep_left, keep_right = join.how in ("left", "full"), join.how in ("right", "full")
    every = (
        buffer.select(*buffer_schema(join).fieldNames(), F.lit(False).alias("_new"),
                      *[F.lit(None).cast(f.dataType).alias(f.name) for f in _ORIGIN])
        .unionByName(_as_buffer(join, left, "left"))
        .unionByName(_as_buffer(join, right, "right"))
    )
    # The one shuffle, or none in one partition: the windows below keep this partitioning.
    every = one_partition(every) if together else every.repartition(*keys)
    copies = Window.partitionBy(*keys, "_side", "_event_id").orderBy(
        "_new", "_partition", "_offset"
    )
    every = every.withColumn("_copy", F.row_number().over(copies)).where(F.col("_copy") == 1)

    null_key = reduce(lambda a, b: a | b, [F.col(k).isNull() for k in keys])
    unkept = {"left": side == "right", "right": side == "left", "full": F.lit(False)}[join.how]
    reason = F.when(~new, None).when(unkept & null_key, "null_key")
    if before is not None:
        behind = F.col("_time") < literals.timestamp(before)
        outside = F.col("_time") < literals.timestamp(before - join.within)
        reason = reason.when((side == "right") & outside, "window_closed").when(
            behind, "behind_watermark")
    every = every.withColumn("_reason", reason)
    joining = F.col("_reason").isNull()
    is_left, is_right = joining & (side == "left"), joining & (side == "right")

    def in_window(left_time: Column, right_time: Column) -> Column:
        return (right_time >= left_time) & (right_time <= left_time + F.lit(join.within))

    # A null key joins nothing: such rows are left out of the lists (they share a partition).
    by_key = Window.partitionBy(*keys)
    right_row = F.struct(F.col("_time").alias("_r_time"), new.alias("_r_new"),
                         *join.right.names)
    rights = F.collect_list(F.when(is_right & ~null_key, right_row)).over(by_key)
    pairs = F.when(is_left, F.filter(
        rights, lambda r: in_window(F.col("_time"), r["_r_time"]) & (new | r["_r_new"])
    ))
    now = F.when(is_left, F.col("_matched") | F.exists(
        rights, lambda r: in_window(F.col("_time"), r["_r_time"])
    ))
    if keep_right:
        lefts = F.collect_list(F.when(is_left & ~null_key, F.col("_time"))).over(by_key)
        now = now.when(is_right, F.coalesce(F.col("_matched"), F.lit(False)) | F.exists(
            lefts, lambda t: in_window(t, F.col("_time"))
        ))
    every = every.select("*", pairs.alias("_pairs"), now.alias("_now"))
    # Computed once: four outputs are cut from it.
    rows = every.localCheckpoint(eager=True) if cache is None else cache(every)

    closed, expired = F.lit(False), F.lit(False)
    if after is not None:
        closed = is_left & (F.col("_time") < literals.timestamp(after - join.within))
        expired = is_right & (F.col("_time") < literals.timestamp(after))
    matches = rows.where(is_left).select(
        *join.left.names, F.explode("_pairs").alias("_pair"), "_time"
    ).select(
        *join.left.names, *[F.col("_pair")[n].alias(n) for n in join.right.names],
        F.lit(True).alias(join.matched), *trailer(batch=batch, time=F.col("_time")),
    )
    joined = matches
    if keep_left:
        joined = joined.unionByName(_unmatched(join, rows.where(closed & ~F.col("_now")), "left",
                                               batch=batch))
    if keep_right:
        joined = joined.unionByName(_unmatched(join, rows.where(expired & ~F.col("_now")),
                                               "right", batch=batch))
    tracked = is_left | (is_right & F.lit(keep_right))
    changed = (is_left & ~closed & (new | (F.col("_now") != F.col("_matched")))) | (
        is_right & ~expired & (new | (tracked & (F.col("_now") != F.col("_matched"))))
    )
    return Matches(
        joined=joined,
        late=_late(join, rows.where(~joining), before=before, batch=batch),
        buffered=rows.where(changed)
        .withColumn("_matched", F.when(tracked, F.col("_now")))
        .select(*buffer_schema(join).fieldNames()),
        expired=rows.where(~new & (closed | expired)).select(*BUFFER_KEY),
    )


def _unmatched(join: WindowJoin, rows: DataFrame, which: Which, *, batch: int) -> DataFrame:
    """Output rows of records of one side that closed without a match: the other side's
    columns are null."""
    own = join.left if which == "left" else join.right
    return rows.select(
        *[F.col(f.name) if f in own.fields else F.lit(None).cast(f.dataType).alias(f.name)
          for f in [*join.left.fields, *join.right.fields]],
        F.lit(False).alias(join.matched), *trailer(batch=batch, time=F.col("_time")),
    )


def _as_buffer(join: WindowJoin, records: DataFrame, which: Which) -> DataFrame:
    """New records of one input as buffer rows, with their origin for the late table."""
    side = join.left if which == "left" else join.right
    own = dict(side.columns)
    return records.select(
        F.lit(which).alias("_side"),
        F.col("event_id").alias("_event_id"),
        F.col(side.time).alias("_time"),
        *[F.col(k).alias(_key(k)) for k in join.keys],
        (F.lit(False) if which == "left" else F.lit(None)).cast("boolean").alias("_matched"),
        *[
            F.col(own[f.name]).alias(f.name) if f.name in own
            else F.lit(None).cast(f.dataType).alias(f.name)
            for f in [*join.left.fields, *join.right.fields]
        ],
        F.lit(True).alias("_new"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        record_json().alias("_record"),
    )


def _late(join: WindowJoin, rows: DataFrame, *, before: datetime | None, batch: int) -> DataFrame:
    """Late-table rows (`lakelog.joins.late.SCHEMA`) of the rows with a `_reason`."""
    topic = F.when(F.col("_side") == "left", join.left.topic.name).otherwise(
        join.right.topic.name
    )
    return rows.select(
        F.col("_side").alias("side"),
        topic.alias("topic"),
        F.col("_partition").alias("partition"),
        F.col("_offset").alias("offset"),
        F.col("_event_id").alias("event_id"),
        F.col("_time").alias("event_time"),
        F.col("_reason").alias("reason"),
        literals.timestamp(before).alias("watermark"),
        F.col("_record").alias("record"),
        *trailer(batch=batch, time=F.col("_time")),
    )
