"""Property: the consumer's microbatches over a real topic equal the one-pass windows.

Unlike `test_windows_properties` (the step on in-memory tables), this runs `consumers.run_batch`
on a topic appended in random chunks, with a random `max_records_per_batch`: a batch that takes
whole log files gets its facts (event-time span, watermark, nulls) from the files' statistics,
one cut short inside a file from its records as read in the test's process (`held_records`) or,
read by Spark, from a pass over them, and all must give the same windows.
With policy ``correct`` nothing is held back, so the table equals `batch_windows` over every
record; with ``drop`` it equals `batch_windows` over the records not in the late table. The
bookkeeping columns depend on the split and are left out, but the watermark must be the
greatest event time less the lateness, and every window it passed final.
"""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import timedelta

import pytest
from engine_helpers import record
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from windows_helpers import public

from lakelog import consumers
from lakelog.consumers import checkpoints
from lakelog.consumers.watermarks import Watermark, watermark_of
from lakelog.log import held_records, ingest
from lakelog.log.offsets import read_offsets, topic_snapshot
from lakelog.windows import (
    Count, Hopping, Max, Session, Sliding, Sum, Tumbling, WindowedAggregate, batch_windows,
)
from lakelog.windows.consumer import prepared

KINDS = {
    "tumbling": Tumbling(timedelta(seconds=60)),
    "hopping": Hopping(size=timedelta(seconds=60), hop=timedelta(seconds=20)),
    "sliding": Sliding(timedelta(seconds=45)),
    "session": Session(timedelta(seconds=30)),
    "session, final": Session(timedelta(seconds=30)),
}


def expensive(records):
    """A `prepare` that keeps some records: the statistics then describe more than the events."""
    return records["events"].where(F.col("amount") >= 2)


#: Per window kind (sessions twice: emit modes keep merged sessions apart), an emit mode, whether events are `prepare`d (by a `prepare` that says it
#: keeps the records' times, or not), and a late policy: together every one of each. (A hopping
#: record may be late for some of its windows only, so dropping it is not the same as leaving
#: the record out: hopping windows correct.)
CASES = {
    "tumbling": ("update", None, "drop"),
    "hopping": ("final", "keeps time", "correct"),
    "sliding": ("final", "prepares", "drop"),
    "session": ("update", None, "correct"),
    "session, final": ("final", "keeps time", "drop"),  # open sessions merge in the state
}


@pytest.mark.parametrize("read", ["held", "spark"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_microbatches_from_statistics_or_a_pass_equal_one_batch(
    spark, lake, topic, now, kind, read, monkeypatch
):
    if read == "spark":  # a cut batch's facts then need a pass over its records
        monkeypatch.setattr(held_records, "HELD_RECORDS", 0)
    emit, prepare, policy = CASES[kind]
    rng = random.Random(kind)
    records = [record(i, seconds=rng.randint(0, 300)) for i in range(30)]
    rng.shuffle(records)
    lateness = timedelta(seconds=20)
    agg = WindowedAggregate(
        "prop", (topic.name,), KINDS[kind], (Count("n"), Sum("total", "amount"),
                                            Max("high", "amount")),
        group_by=("product_id",), watermark=Watermark(lateness=lateness), late=policy,
        emit=emit, prepare=expensive if prepare else None,
        prepare_keeps_time=prepare == "keeps time", rows_per_file=8,
    )
    topics = {topic.name: topic}
    sent, moment = 0, now
    while sent < len(records):
        chunk = rng.randint(1, 10)
        lines = [json.dumps(r) for r in records[sent:sent + chunk]]
        ingest.produce(lake, spark, topic, lines, source="test", now=moment)
        sent += chunk
        # Some batches take whole files (statistics), some stop inside one (a pass).
        consumer = dataclasses.replace(agg.consumer, max_records_per_batch=rng.choice([4, 1000]))
        consumers.run_until_caught_up(lake, consumer, topics, now=lambda: moment)
        moment += timedelta(seconds=1)

    log = topic_snapshot(lake, topic)
    every = read_offsets(lake, log, {p: (0, 10**9) for p in range(topic.partitions)})
    mark = watermark_of(checkpoints.load(lake, agg.consumer.name).state)
    assert mark == every.agg(F.max("event_time")).first()[0].astimezone() - lateness
    live = lake.read(lake.snapshot(agg.windows.path))
    if agg.state is not None:  # final mode: the open windows are still in the state
        live = live.unionByName(lake.read(lake.snapshot(agg.state.path)).where(~F.col("is_final")))
    assert live.where((F.col("window_end") <= F.lit(mark)) & ~F.col("is_final")).isEmpty()
    events = prepared(agg, {topic.name: every})
    if policy == "drop":
        late = lake.read(lake.snapshot(agg.late_records.path)).select("event_id")
        events = events.join(late, "event_id", "left_anti")
    assertDataFrameEqual(public(live), public(batch_windows(agg, events)))
