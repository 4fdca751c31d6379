"""Right to erasure: a subject leaves the log, dead letters, derived tables, landing files and
time travel; every other record keeps its offset; aggregates are recomputed without it; the
record proves it without holding it; a crashed erasure resumes."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from engine_helpers import TOTALS, add_to_totals, CrashAfterCommit, drop, make_topic, record
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from lakelog import consumers
from lakelog.consumers import Consumer, Output
from lakelog.consumers.watermarks import Watermark
from lakelog.erasure import erase_subject, find_erased, find_subject, recorded
from lakelog.erasure.subject import subject_hash
from lakelog.errors import ConfigError
from lakelog.log import dead_letters, ingest
from lakelog.log.landing import load_manifest
from lakelog.log.offsets import partition_states
from lakelog.pipeline import Pipeline
from lakelog.windows import Count, Sum, Tumbling, WindowedAggregate

EVENTS = make_topic()
COPY = Output("streams/copy", T.StructType([T.StructField("event_id", T.StringType()),
                                            T.StructField("user_id", T.StringType())]))



PIPELINE = Pipeline(
    "erasure",
    topics=[EVENTS],
    consumers=[
        Consumer("totals", ("events",), (TOTALS,), add_to_totals, max_records_per_batch=15),
        Consumer("copy", ("events",), (COPY,),
                 lambda batch: {COPY.path: batch.records["events"].select("event_id", "user_id")}),
    ],
    windows=[WindowedAggregate(
        "per_ten_seconds", ("events",), Tumbling(timedelta(seconds=10)),
        (Count("events"), Sum("amount", "amount")), group_by=("product_id",),
        watermark=Watermark(lateness=timedelta(seconds=5)), max_records_per_batch=15,
    )],
    subject_columns=("user_id",),
)
NAMES = ("totals", "copy", "window.per_ten_seconds")
SUBJECT = "u3"  # record(i) is user u{i % 7}'s


def clock() -> datetime:
    return datetime.now(timezone.utc)


def land(lake, spark, first: int, last: int, now, extra=()) -> None:
    lines = [record(i) for i in range(first, last)] + list(extra)
    drop(lake.root, "events", f"{first}.ndjson", lines)
    ingest.ingest(lake, spark, EVENTS, now=now)


def catch_up(lake) -> None:
    for name in NAMES:
        consumers.run_until_caught_up(lake, PIPELINE.consumer(name), PIPELINE.all_topics,
                                      now=clock)


def log_rows(lake):
    return {(r["partition"], r["offset"], r["event_id"], r["user_id"]) for r in
            lake.read(lake.snapshot(EVENTS.path)).collect()}


def expected_totals(spark, events: list[int]):
    rows = [(f"p{i % 3}", float(i)) for i in events]
    return spark.createDataFrame(rows, "product_id string, amount double").groupBy(
        "product_id").agg(F.count("*").alias("n"), F.sum("amount").alias("amount"))


#: A malformed line of the subject (a wrong type), one of another user, and one with no user.
BAD = ['{"event_id":"bad1","user_id":"u3","amount":"lots"}', '{"event_id":"bad2","user_id'
       '":"u5","amount":"none"}', '{"event_id":"bad3",']


def test_a_subject_leaves_every_table_copy_and_file(lake, spark, now):
    land(lake, spark, 0, 25, now, extra=BAD)
    catch_up(lake)
    land(lake, spark, 25, 40, now)
    catch_up(lake)
    before = log_rows(lake)
    version_before = lake.snapshot(EVENTS.path).version
    heads = {p: s.head for p, s in partition_states(lake.snapshot(EVENTS.path), 3).items()}
    subject_events = [i for i in range(40) if i % 7 == 3]

    done = erase_subject(lake, PIPELINE, SUBJECT, now=now)

    # The log: the subject's records are gone, every other keeps its partition and offset.
    assert log_rows(lake) == {r for r in before if r[3] != SUBJECT}
    assert {p: s.head for p, s in partition_states(lake.snapshot(EVENTS.path), 3).items()} == heads
    assert [r["raw"] for r in lake.read(lake.snapshot(dead_letters.PATH)).collect()
            if "u3" in r["raw"] or "u5" in r["raw"]] == [BAD[1]]
    assert lake.read(lake.snapshot(COPY.path)).where("user_id = 'u3'").isEmpty()
    erased = {t.path: t.rows for t in done.tables}
    assert erased[EVENTS.path] == erased[COPY.path] == len(subject_events)
    assert erased[dead_letters.PATH] == 1
    # Totals and windows hold no user column: their consumers are rebuilt, not kept.
    assert set(done.rebuilt) == {"totals", "window.per_ten_seconds"} and done.kept == ()
    # Time travel: no version before the erasure can be loaded, nor its files read.
    with pytest.raises(Exception):
        lake.read(lake.snapshot(EVENTS.path, version_before)).count()
    logs = Path(lake.root, EVENTS.path, "_delta_log")
    assert not any('"u3"' in f.read_text() for f in logs.glob("*.json"))
    # Landing files lose the subject's lines and are not ingested again.
    landed = "".join(p.read_text() for p in Path(lake.root, "landing", "events").glob("*"))
    assert '"u3"' not in landed and '"u5"' in landed and '"bad3",' in landed
    assert ingest.ingest(lake, spark, EVENTS, now=now).appended == 0
    landing = Path(lake.root, "landing", "events")
    assert {(f"landing/events/{p.name}", p.stat().st_size) for p in landing.glob("*")} <= set(
        load_manifest(lake, "events").ingested)  # known by their new sizes

    catch_up(lake)  # the rebuilt consumers recompute from the erased log
    kept = [i for i in range(40) if i not in subject_events]
    assertDataFrameEqual(lake.read(lake.snapshot(TOTALS.path)), expected_totals(spark, kept))
    windows = lake.read(lake.snapshot("streams/per_ten_seconds")).agg(F.sum("events")).first()
    late = lake.read(lake.snapshot("streams/per_ten_seconds_late"))
    assert not {r["event_id"] for r in late.collect()} & {f"e{i}" for i in subject_events}
    assert windows[0] + late.count() == len(kept)  # each record counted, or late, once
    assert find_subject(lake, PIPELINE.subject_columns, SUBJECT) == {}

    # The record holds the subject's salted hash, never the subject.
    [erasure] = recorded(lake)
    assert erasure.erasure_id == done.id
    assert erasure.subject_hash == subject_hash(SUBJECT, erasure.salt)
    assert SUBJECT not in json.dumps([r for r in lake.read_arrow(
        lake.snapshot("_erasures")).to_pylist()], default=str).replace(erasure.salt, "")
    assert find_erased(lake, PIPELINE.subject_columns) == {}

    # New records of the subject: appended at the old heads, and the check finds them.
    land(lake, spark, 40, 50, now)
    after = log_rows(lake)
    assert {o for p, o, e, u in after if e in {f"e{i}" for i in range(40, 50)}} == {
        o for p, o, e, u in after if o >= heads[p]}
    catch_up(lake)
    assert set(find_erased(lake, PIPELINE.subject_columns)) == {EVENTS.path, COPY.path}


def test_a_crashed_erasure_resumes_and_finishes(spark, tmp_path, now):
    lake = CrashAfterCommit(spark, str(tmp_path / "lake"), EVENTS.path)
    land(lake, spark, 0, 30, now)
    catch_up(lake)
    lake.armed = True
    with pytest.raises(RuntimeError, match="crash after committing log/events"):
        erase_subject(lake, PIPELINE, SUBJECT, now=now)
    assert recorded(lake) == []  # started, not done

    done = erase_subject(lake, PIPELINE, SUBJECT, now=now)
    [erasure] = recorded(lake)
    assert erasure.erasure_id == done.id  # the same erasure, resumed
    assert set(done.rebuilt) == {"totals", "window.per_ten_seconds"}  # decided before the crash
    catch_up(lake)
    kept = [i for i in range(30) if i % 7 != 3]
    assertDataFrameEqual(lake.read(lake.snapshot(TOTALS.path)), expected_totals(spark, kept))
    assert find_subject(lake, PIPELINE.subject_columns, SUBJECT) == {}
    assert sorted(r[2] for r in log_rows(lake)) == sorted(f"e{i}" for i in kept)


def test_aggregates_over_a_log_retention_has_cut_are_kept_with_the_reason(lake, spark, now):
    land(lake, spark, 0, 15, now)
    land(lake, spark, 15, 30, now)
    catch_up(lake)
    snapshot = lake.snapshot(EVENTS.path)
    [first] = [f for f in snapshot.files()
               if f.partition_values["partition"] == 0 and f.min_values["offset"] == 0]
    lake.write(snapshot, None, remove=[first])  # as retention removes a log's oldest file

    done = erase_subject(lake, PIPELINE, SUBJECT, now=now)

    assert done.rebuilt == ()
    assert {c for c, _ in done.kept} == {"totals", "window.per_ten_seconds"}
    assert all("retention has removed the oldest records of events" in why for _, why in done.kept)
    assert lake.read(lake.snapshot(COPY.path)).where("user_id = 'u3'").isEmpty()


def test_incremental_results_after_erasures_equal_one_batch_without_the_subjects(
        lake, spark, now):
    """Property: over random batch splits with erasures in between, the totals equal one
    computation over the records no erasure removed (a subject's records landed after its
    erasure stay: an erasure removes what is held when it runs)."""
    r = random.Random(11)
    start, kept = 0, []
    for _ in range(4):
        end = start + r.randint(5, 20)
        land(lake, spark, start, end, now)
        kept += range(start, end)
        consumers.run_until_caught_up(lake, PIPELINE.consumer("totals"), PIPELINE.all_topics,
                                      now=clock, max_batches=r.randint(1, 3))
        subject = r.randint(0, 6)
        erase_subject(lake, PIPELINE, f"u{subject}", now=now)
        kept = [i for i in kept if i % 7 != subject]
        start = end
    catch_up(lake)
    assertDataFrameEqual(lake.read(lake.snapshot(TOTALS.path)), expected_totals(spark, kept))
    assert sorted(r[2] for r in log_rows(lake)) == sorted(f"e{i}" for i in kept)


def test_bad_requests_get_clear_errors(lake, now):
    with pytest.raises(ConfigError, match="non-empty identifier"):
        erase_subject(lake, PIPELINE, "  ", now=now)
    no_subjects = Pipeline("plain", topics=[EVENTS])
    with pytest.raises(ConfigError, match="declares no subject_columns"):
        erase_subject(lake, no_subjects, SUBJECT, now=now)
    with pytest.raises(ConfigError, match="subject_columns must each be a column name"):
        Pipeline("bad", topics=[EVENTS], subject_columns=[3])


def test_an_erasure_of_nobody_changes_nothing(lake, spark, now):
    land(lake, spark, 0, 10, now)
    catch_up(lake)
    versions = {p: lake.snapshot(p).version for p in (EVENTS.path, COPY.path, TOTALS.path)}
    done = erase_subject(lake, PIPELINE, "nobody", now=now)
    assert done.rows == 0 and done.tables == () and done.rebuilt == () and done.landing == ()
    assert {p: lake.snapshot(p).version for p in versions} == versions
    assert [e.erasure_id for e in recorded(lake)] == [done.id]
