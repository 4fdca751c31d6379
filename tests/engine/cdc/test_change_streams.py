"""Change streams out: a keyed table published as a changelog topic, and mirrored back from it."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import timedelta

import pytest
from cdc_helpers import Crash, crash_on
from test_compacted import TABLE, apply, change

from lakelog import consumers
from lakelog.cdc import change_streams
from lakelog.cdc.change_streams import ChangeStream, ChangeStreamError, publish_changes
from lakelog.cdc.compacted import CompactedTable, live_rows, purge_tombstones
from lakelog.consumers import Output
from lakelog.errors import ConfigError

LAYOUTS = ["copy-on-write", "merge-on-read"]


@pytest.fixture(params=LAYOUTS)
def table(request):
    return replace(TABLE, merge_on_read=request.param == "merge-on-read")


def mirror_of(stream: ChangeStream) -> CompactedTable:
    """A compacted table of the stream's topic: what a subscriber rebuilds."""
    return CompactedTable("customers_mirror", stream.topic, stream.row, stream.table.keys,
                          rows_per_file=3)


def rows(df):
    return sorted(json.dumps(r.asDict(), default=str, sort_keys=True) for r in df.collect())


def mirrored(lake, stream, now):
    mirror = mirror_of(stream)
    consumers.run_until_caught_up(lake, mirror.consumer, {stream.topic.name: stream.topic},
                                  now=lambda: now)
    return live_rows(lake, mirror)


def ops(lake, stream):
    """(op, key, table version) of every published change, in table-version order."""
    df = lake.read(lake.snapshot(stream.topic.path))
    return sorted(((r["op"], r["pk"], r["source"]["txId"]) for r in df.collect()),
                  key=lambda c: (c[2], c[1]))


def test_first_publication_is_a_snapshot_then_changes_follow(lake, spark, now, table):
    stream = ChangeStream(table.output)
    apply(lake, spark, now, [change("c", 1, lsn=10, name="a"), change("c", 2, lsn=11, name="b")],
          table)
    first = publish_changes(lake, stream, now=now)
    assert (first.changes, first.snapshot) == (2, True)
    assert sorted(ops(lake, stream)) == [("r", "1", first.versions[1]), ("r", "2", first.versions[1])]
    apply(lake, spark, now, [change("u", 1, lsn=20, name="a2"), change("d", 2, lsn=21),
                             change("c", 3, lsn=22, name="c")], table)
    second = publish_changes(lake, stream, now=now)
    assert second.snapshot is False and second.changes == 3
    new = [c for c in ops(lake, stream) if c[2] > first.versions[1]]
    assert sorted((op, pk) for op, pk, _ in new) == [("c", "3"), ("d", "2"), ("u", "1")]
    record = lake.read(lake.snapshot(stream.topic.path)).where("op = 'u'").first()
    assert (record["before"]["name"], record["after"]["name"]) == ("a", "a2")
    assert record["source"]["table"] == "tables/customers"
    assert publish_changes(lake, stream, now=now).changes == 0  # nothing new: nothing appended
    assert rows(mirrored(lake, stream, now)) == rows(live_rows(lake, table))


@pytest.mark.parametrize("feed", ["held", "spark", "too many rows to hold"])
def test_a_mirror_rebuilt_from_the_stream_equals_the_table_after_random_changes(
        lake, spark, now, table, monkeypatch, feed):
    """Random creates, updates, deletes, replays and tombstone purges, published at random
    points: the table rebuilt from its change stream equals it every time, whether its change
    feed is read here (a small table's) or by Spark."""
    if feed == "spark":
        monkeypatch.setattr(type(lake), "changes_arrow", lambda *args: None)
    if feed == "too many rows to hold":  # read here, then found too large: Spark reads it
        monkeypatch.setattr(change_streams, "HELD_FEED_ROWS", 0)
    stream = ChangeStream(table.output)
    rng = random.Random(7)
    lsn, names = 100, {}
    for round_ in range(5):
        lines = []
        for _ in range(rng.randint(1, 6)):
            key, lsn = rng.randint(1, 8), lsn + 1
            if key in names and rng.random() < 0.3:
                lines.append(change("d", key, lsn=lsn))
                names.pop(key)
            else:
                names[key] = f"n{lsn}"
                lines.append(change("u" if key in names else "c", key, lsn=lsn, name=names[key]))
        if round_ and rng.random() < 0.5:
            lines.append(lines[0])  # a replayed change is no change
        apply(lake, spark, now, lines, table)
        if round_ == 3:
            purge_tombstones(lake, table, now=now + timedelta(days=30))
        if rng.random() < 0.7:
            publish_changes(lake, stream, now=now)
            assert rows(mirrored(lake, stream, now)) == rows(live_rows(lake, table))
    publish_changes(lake, stream, now=now)
    assert rows(mirrored(lake, stream, now)) == rows(live_rows(lake, table))


def test_a_crash_before_the_commit_publishes_every_change_once(lake, spark, now, monkeypatch):
    stream = ChangeStream(TABLE.output)
    apply(lake, spark, now, [change("c", 1, lsn=10, name="a")])
    publish_changes(lake, stream, now=now)
    apply(lake, spark, now, [change("u", 1, lsn=20, name="b"), change("c", 2, lsn=21, name="c")])
    crash_on(monkeypatch, change_streams, "append", 1)
    with pytest.raises(Crash):
        publish_changes(lake, stream, now=now)
    monkeypatch.undo()
    assert publish_changes(lake, stream, now=now).changes == 2
    assert publish_changes(lake, stream, now=now).changes == 0
    assert sorted((op, pk) for op, pk, _ in ops(lake, stream)) == [("c", "2"), ("r", "1"),
                                                                   ("u", "1")]


def test_a_keyed_stream_publishes_only_its_own_columns_and_real_changes(lake, spark, now):
    """An upserted stream: bookkeeping columns (``_…``) are not published, and a row rewritten
    with the same own columns is no change."""
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("total", T.LongType()),
                           T.StructField("_seen", T.LongType())])
    output = Output("streams/totals", schema, keys=("id",))
    stream = ChangeStream(output)
    assert stream.row.fieldNames() == ["id", "total"]
    lake.create_table(output.path, schema)

    def upsert(values):  # the whole table rewritten: the change feed names every row
        snapshot = lake.snapshot(output.path)
        lake.write(snapshot, spark.createDataFrame(values, schema), remove=snapshot.files())

    upsert([(1, 10, 0), (2, 20, 0)])
    publish_changes(lake, stream, now=now)
    upsert([(1, 10, 5), (2, 25, 5)])  # 1's own columns did not change
    result = publish_changes(lake, stream, now=now)
    assert result.changes == 1
    assert [(op, pk) for op, pk, _ in ops(lake, stream)] == [("r", "1"), ("r", "2"), ("u", "2")]


def test_a_recreated_table_stops_the_stream_with_the_reason(lake, spark, now):
    stream = ChangeStream(TABLE.output)
    apply(lake, spark, now, [change("c", 1, lsn=10, name="a")])
    publish_changes(lake, stream, now=now)
    lake.replace_table(TABLE.path, TABLE.output.schema)  # what a rebuild of its consumer does
    apply(lake, spark, now, [change("c", 9, lsn=90, name="z")])
    with pytest.raises(ChangeStreamError, match="recreated"):
        publish_changes(lake, stream, now=now)


def test_a_table_without_keys_has_no_change_stream():
    from pyspark.sql import types as T

    with pytest.raises(ConfigError, match="no keys"):
        ChangeStream(Output("streams/plain", T.StructType([T.StructField("x", T.LongType())])))
