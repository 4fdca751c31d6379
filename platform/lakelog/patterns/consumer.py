"""A `Pattern` as a consumer, ``pattern.<name>``: its topics in, matches out, exactly once.

Per microbatch, in this order:

1. **Project** each topic's new records to the pattern's events: the key, the event time in
   microseconds, the record's place in its log, a flag per condition (the step's or absence's
   `where`, on its topic) and the value of each measure's column.
2. **Late** — an event older than the watermark before the batch goes to
   ``streams/<name>_late`` with its record, and is not matched (the windows it could fall in
   were decided).
3. **Match** — the pending events (``_state/patterns/<name>/pending``) and the new ones, per
   key, through `lakelog.patterns.matcher` with the watermark after the batch (in a Python
   worker, `lakelog.patterns.worker`: the matcher backtracks, which column expressions
   cannot). The events are shuffled by key and sorted, and each worker takes them as Arrow
   batches, a run of keys at a time: a key costs the matcher's own work, not a pandas frame of
   its own (`applyInPandas` made one per key, about 1 ms each: 2-3 s of a 2,500-event batch).
   A start whose window the watermark has passed is decided: a match, or not.
4. **Write** the matches to ``streams/<name>`` (appended: one row per match, measures computed by
   Spark from the matched events), the late events, and last the state: the events from each
   key's first undecided start on, replacing the pending table.

The watermark (consumer state, `lakelog.consumers.watermarks`) follows the slowest topic: the
least of the topics' greatest event times, less the allowed lateness (a topic quiet for
`idle_timeout` holds nothing back); an idle tick advances it on a quiet stream.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial, reduce
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.consumers import BatchInput, Changes, Consumer, Output, Role
from lakelog.consumers import event_times
from lakelog.consumers.definitions import described
from lakelog.consumers.watermarks import to_us, watermark_of
from lakelog.lake.one_partition import one_partition
from lakelog.log.offsets import RangeStats
from lakelog.log.records import record_json
from lakelog.patterns.pattern import Pattern
from lakelog.patterns.worker import match_batches
from lakelog.spark import literals

LATE = T.StructType([
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()),
    T.StructField("event_id", T.StringType()),
    T.StructField("event_time", T.TimestampType()),
    T.StructField("watermark", T.TimestampType()),
    T.StructField("record", T.StringType()),
    T.StructField("batch", T.LongType()),
])
#: What the matcher adds to an event: its match (the id of the match's first event) and step;
#: step -1: kept pending.
FOUND = (T.StructField("_match", T.StringType()), T.StructField("_step", T.IntegerType()))
ORDER = ("_t", "_k", "partition", "offset")


def output(p: Pattern) -> Output:
    return Output(f"streams/{p.name}", p.output_schema)


def late(p: Pattern) -> Output:
    return Output(f"streams/{p.name}_late", LATE, role=Role.LATE)


def pending(p: Pattern) -> Output:
    first = p.topics[0].table_schema
    schema = T.StructType([
        T.StructField("_id", T.StringType()),
        *[T.StructField(k, first[k].dataType) for k in p.key],
        T.StructField("_t", T.LongType()),
        T.StructField("_k", T.IntegerType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        *[T.StructField(f"_f{n}", T.BooleanType()) for n in range(len(p.conditions))],
        *[T.StructField(f"_m{n}", p.source_type(m)) for n, m in enumerate(p.measures)],
    ])
    return Output(f"_state/patterns/{p.name}/pending", schema, keys=("_id",), role=Role.STATE)


def consumer(p: Pattern) -> Consumer:
    return Consumer(
        name=f"pattern.{p.name}",
        topics=tuple(t.name for t in p.topics),
        outputs=(output(p), late(p), pending(p)),  # the state last
        transform=partial(transform, p),
        max_records_per_batch=p.max_records_per_batch,
        advance=partial(advance, p),
        idle_tick=partial(p.watermark.idle, horizon=p.within),
        definition=definition(p),
    )


def definition(p: Pattern) -> tuple[tuple[str, str], ...]:
    """What the pattern's matches and pending events hold (`Consumer.definition`): its key,
    elements, time bound and measures; not its watermark's lateness."""
    return (
        ("key", ", ".join(p.key)),
        ("elements", "; ".join(described(e) for e in p.elements)),
        ("within", str(p.within)),
        ("measures", "; ".join(described(m) for m in p.measures)),
    )


def advance(p: Pattern, batch: BatchInput) -> dict[str, Any]:
    """The watermark after this batch, from each topic's greatest event time (and, for a batch
    cut short, its partitions'): the batch's `RangeStats` tell it (the log's file statistics,
    or its records read here), else a pass over the records finds it."""
    topics = [t.name for t in p.topics]
    latest = event_times.from_stats(batch.stats, topics, batch.cut) or event_times.greatest(
        [(t, batch.records[t], "event_time") for t in topics], batch.cut)
    return p.watermark.advance(batch.state, latest.by_input, batch.now, hold=latest.hold)


def transform(p: Pattern, batch: BatchInput) -> dict[str, DataFrame | Changes | None]:
    before, after = watermark_of(batch.state), watermark_of(batch.next_state)
    new = reduce(DataFrame.unionByName, [
        _events(p, n, batch.records[t.name], before, batch=batch.batch)
        for n, t in enumerate(p.topics)
    ])
    # Not kept (`BatchInput.cached`): the match reads the events once, and the late rows, when
    # the statistics allow any, are read again, only they with their records' JSON; kept, every
    # event's record was turned to JSON and stored, a Spark job more (benchmarks/README.md).
    state = pending(p)
    # Of the state's schema, given (`to`): over Spark Connect `mapInArrow` names its input's
    # columns, which a frame whose schema the client does not know asks the server for.
    every = batch.current(state).unionByName(
        new.where(~F.col("_late")).select(*state.schema.fieldNames())).to(state.schema)
    if after is None:  # no event time seen yet: nothing is decided
        matches = batch.lake.spark.createDataFrame([], p.output_schema)
        kept = every
    else:
        match = partial(match_batches, p.compiled(), to_us(after), tuple(p.key))
        # Each key's rows together, in order: in one partition when they are few.
        spread = one_partition(every) if batch.few(state) else every.repartition(*p.key)
        by_key = spread.sortWithinPartitions(*p.key, *ORDER)
        found = batch.cached(by_key.mapInArrow(match, T.StructType([*state.schema, *FOUND])))
        matches = _rows(p, found.where(F.col("_step") >= 0), batch=batch.batch)
        kept = found.where(F.col("_step") < 0).select(*state.schema.fieldNames())
    return {
        output(p).path: matches,
        # None (the batch's transaction alone, no job) when the log's statistics show no event
        # older than the watermark before the batch.
        late(p).path: new.where(F.col("_late")).select(*LATE.fieldNames())
        if _may_be_late(batch, before) else None,
        state.path: Changes(kept, files=batch.outputs[state.path].files(), replace=True),
    }


def _may_be_late(batch: BatchInput, before: datetime | None) -> bool:
    if before is None:
        return False
    stats = RangeStats.combined(batch.stats.values())
    if stats is None:
        return True
    return stats.event_time is not None and to_us(stats.event_time[0]) < to_us(before)


def _events(p: Pattern, index: int, records: DataFrame, before: datetime | None, *,
            batch: int) -> DataFrame:
    """The pattern's events of topic number `index`, with their late-table columns."""
    topic = p.topics[index].name

    def on(element) -> Any:
        if element.topic != topic:
            return F.lit(False)
        return F.lit(True) if element.where is None else F.coalesce(F.expr(element.where),
                                                                    F.lit(False))

    measures = []
    for n, m in enumerate(p.measures):
        column = F.lit(1) if m.function == "count" else F.col(m.column)
        own = p.step(m.step).topic == topic
        measures.append((column if own else F.lit(None)).cast(p.source_type(m)).alias(f"_m{n}"))
    late_before = F.lit(False) if before is None else \
        F.col("event_time") < literals.timestamp(before)
    return records.select(
        F.concat_ws(":", F.lit(topic), "partition", "offset").alias("_id"),
        *p.key,
        F.unix_micros("event_time").alias("_t"),
        F.lit(index).alias("_k"),
        "partition", "offset",
        *[on(e).alias(f"_f{n}") for n, e in enumerate(p.conditions)],
        *measures,
        late_before.alias("_late"),
        F.lit(topic).alias("topic"), "event_id", "event_time",
        literals.timestamp(before).alias("watermark"),
        record_json().alias("record"),
        F.lit(batch).cast("long").alias("batch"),
    )


def _rows(p: Pattern, matched: DataFrame, *, batch: int) -> DataFrame:
    """One output row per match, its measures aggregated from its matched events."""
    steps = [s.name for s in p.steps]
    measures = []
    for n, m in enumerate(p.measures):
        on_step = F.col("_step") == steps.index(m.step)
        value = F.col(f"_m{n}")
        if m.function in ("first", "last"):
            ordered = F.when(on_step, F.struct(*ORDER, value.alias("v")))
            pick = F.min(ordered) if m.function == "first" else F.max(ordered)
            measures.append(pick["v"].alias(m.name))
        elif m.function == "count":
            measures.append(F.count(F.when(on_step, 1)).alias(m.name))
        else:
            fn = {"min": F.min, "max": F.max, "sum": F.sum}[m.function]
            measures.append(fn(F.when(on_step, value)).cast(p.measure_type(m)).alias(m.name))
    start = F.timestamp_micros(F.min("_t"))
    return matched.groupBy("_match").agg(
        *[F.first(k).alias(k) for k in p.key],
        start.alias("match_start"),
        F.timestamp_micros(F.max("_t")).alias("match_end"),
        F.count("*").alias("events"),
        *measures,
    ).select(
        F.col("_match").alias("match_id"), *p.key, "match_start", "match_end", "events",
        *[m.name for m in p.measures], F.lit(batch).cast("long").alias("batch"),
        F.date_trunc("hour", "match_start").alias("hour"),
    )

