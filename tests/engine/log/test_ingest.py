"""Landing-zone ingestion: exactly once per file, dead letters, duplicates, the records-in invariant.

Every test runs both ways a batch is ingested: held in this process after one Spark job (a
batch up to `held_batch.SMALL_INGEST_BYTES`, the usual case) and through Spark (larger ones)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from engine_helpers import drop, make_topic, record, table_loads

from lakelog.lake import AppTxn, EmbeddedLake, driver_write
from lakelog.log import dead_letters, held_batch, ingest, landing


@pytest.fixture(autouse=True, params=["held", "spark"])
def ingest_path(request, monkeypatch):
    if request.param == "spark":  # a batch too large to hold, of more records than a small write
        monkeypatch.setattr(held_batch, "SMALL_INGEST_BYTES", -1)
        monkeypatch.setattr(driver_write, "SMALL_WRITE_ROWS", -1)
    return request.param


def table_rows(lake, path):
    return lake.read(lake.snapshot(path)).collect()


def assert_invariant(result):
    assert result.read == result.appended + result.duplicates + result.dead_letters


def test_ingest_appends_each_file_once(lake, spark, topic, now):
    drop(lake.root, topic.name, "a.ndjson", [record(i) for i in range(20)])
    first = ingest.ingest(lake, spark, topic, now=now)
    assert (first.read, first.appended, first.duplicates, first.dead_letters) == (20, 20, 0, 0)
    assert first.files == ("landing/events/a.ndjson",)
    again = ingest.ingest(lake, spark, topic, now=now)
    assert again.batch is None and again.appended == 0
    # The same file dropped again under its own name is not appended twice.
    drop(lake.root, topic.name, "a.ndjson", [record(i) for i in range(20)])
    assert ingest.ingest(lake, spark, topic, now=now).batch is None
    assert len(table_rows(lake, topic.path)) == 20


def test_an_ingests_ranges_are_the_offsets_its_records_got(lake, spark, topic, now,
                                                           ingest_path, monkeypatch):
    """Each ingest reports per log partition the offsets its records were given, the second
    going on where the first ended: the held path knows them from the offsets it assigned,
    without loading the log's new version (the log is loaded once), Spark's from that version.
    The manifest is loaded, then again after the plan is saved, and not after it is done."""
    loads = table_loads(monkeypatch)
    results = []
    for name, ids in (("a.ndjson", range(0, 30)), ("b.ndjson", range(30, 50))):
        drop(lake.root, topic.name, name, [record(i) for i in ids])
        del loads[:]
        results.append(ingest.ingest(lake, spark, topic, now=now))
        assert loads.count(topic.path) == (1 if ingest_path == "held" else 2)
        if results[1:]:  # the first ingest created the manifest's table
            assert loads.count(landing.manifest_path(topic.name)) == 2
    rows = lake.read(lake.snapshot(topic.path)).select(
        "partition", "offset", F.col("headers")["source"].alias("source")).collect()
    for result, name in zip(results, ("a.ndjson", "b.ndjson")):
        got: dict[int, tuple[int, int]] = {}
        for r in (r for r in rows if r.source.endswith(name)):
            lo, hi = got.get(r.partition, (r.offset, r.offset + 1))
            got[r.partition] = (min(lo, r.offset), max(hi, r.offset + 1))
        assert dict(result.ranges) == got and len(got) > 1
    assert all(results[1].ranges[p][0] == end for p, (_, end) in results[0].ranges.items()
               if p in results[1].ranges)


def test_envelope_columns(lake, spark, topic, now):
    drop(lake.root, topic.name, "a.ndjson", [record(1, user="alice")])
    ingest.ingest(lake, spark, topic, now=now)
    (row,) = table_rows(lake, topic.path)
    assert row.key == "alice" and row.event_id == "e1" and row.offset == 0
    # Corrected event time = device + (received - sent) = device + 1 s.
    assert (row.event_time - row.device_time).total_seconds() == 1
    assert row.headers == {"source": "landing/events/a.ndjson", "line": "1"}
    assert row.ingest_time == now.replace(tzinfo=None)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "malformed JSON"),
        ("[1, 2, 3]", "malformed JSON"),
        ('"just a string"', "malformed JSON"),
        (json.dumps({k: v for k, v in record(1).items() if k != "user_id"}), "missing required field 'user_id'"),
        (json.dumps({**record(1), "amount": "ten"}), "field 'amount' is not a valid double: ten"),
        (json.dumps({**record(1), "device_time": "yesterday"}), "field 'device_time' is not a valid timestamp"),
        (json.dumps({**record(1), "event_id": None}), "missing required field 'event_id'"),
    ],
)
def test_bad_records_become_dead_letters(lake, spark, topic, now, line, reason):
    drop(lake.root, topic.name, "bad.ndjson", [record(0), line, "", record(2)])
    result = ingest.ingest(lake, spark, topic, now=now)
    assert (result.read, result.appended, result.dead_letters) == (3, 2, 1)
    assert_invariant(result)
    (dead,) = table_rows(lake, dead_letters.PATH)
    assert dead.topic == "events" and dead.source == "landing/events/bad.ndjson"
    assert dead.line == 2 and dead.raw == line and reason in dead.reason


def test_crlf_line_ends_are_not_part_of_a_line(lake, spark, topic, now):
    """A file written with Windows line ends, its last line ended by a CR alone: each line is
    read without its CR, an empty line is blank, and a bad line's dead letter is its text."""
    folder = Path(lake.root) / "landing" / topic.name
    folder.mkdir(parents=True, exist_ok=True)
    text = "\r\n".join([json.dumps(record(0)), "", "{not json", json.dumps(record(3))])
    (folder / "crlf.ndjson").write_bytes((text + "\r").encode())
    result = ingest.ingest(lake, spark, topic, now=now)
    assert (result.read, result.appended, result.dead_letters) == (3, 2, 1)
    (dead,) = table_rows(lake, dead_letters.PATH)
    assert (dead.line, dead.raw) == (3, "{not json")
    rows = sorted(table_rows(lake, topic.path), key=lambda r: r.event_id)
    assert [(r.event_id, r.headers["line"]) for r in rows] == [("e0", "1"), ("e3", "4")]


def test_unknown_fields_are_ignored_and_nulls_allowed(lake, spark, topic, now):
    drop(lake.root, topic.name, "a.ndjson", [{**record(1), "extra": 5, "product_id": None}])
    result = ingest.ingest(lake, spark, topic, now=now)
    assert result.appended == 1 and result.dead_letters == 0


def test_duplicates_are_skipped_and_counted(lake, spark, topic, now):
    drop(lake.root, topic.name, "a.ndjson", [record(i) for i in range(10)] + [record(3), record(4)])
    first = ingest.ingest(lake, spark, topic, now=now)
    assert (first.appended, first.duplicates) == (10, 2)
    # A later delivery of already-appended events (an at-least-once producer's retry).
    drop(lake.root, topic.name, "b.ndjson", [record(5), record(10), record(6)])
    second = ingest.ingest(lake, spark, topic, now=now)
    assert (second.read, second.appended, second.duplicates) == (3, 1, 2)
    assert_invariant(second)
    ids = sorted(r.event_id for r in table_rows(lake, topic.path))
    assert ids == sorted(f"e{i}" for i in range(11))


def test_duplicates_outside_the_dedup_window_are_appended(lake, spark, now):
    from datetime import timedelta

    topic = make_topic(dedup_window=timedelta(minutes=1))
    drop(lake.root, topic.name, "a.ndjson", [record(1, seconds=0)])
    ingest.ingest(lake, spark, topic, now=now)
    drop(lake.root, topic.name, "b.ndjson", [record(1, seconds=3600)])
    assert ingest.ingest(lake, spark, topic, now=now).appended == 1


def test_resume_after_crash_between_dead_letters_and_append(lake, spark, topic, now):
    drop(lake.root, topic.name, "a.ndjson", [record(1), "{bad", record(2)])
    manifest = landing.load_manifest(lake, topic.name)
    plan = landing.IngestPlan(0, tuple(landing.pending_files(lake, manifest)))
    manifest = landing.save_plan(lake, manifest, plan, now=now)
    # A previous attempt got as far as committing the dead letters.
    lines = ingest.read_landing_lines(spark, lake, [f for f, _ in plan.files])
    from lakelog.log.records import parse_lines

    stamped = lines.withColumn("headers", lines["value"].isNull()).withColumn("_ingest_time", F.lit(now))
    dead = dead_letters.dead_letter_rows(parse_lines(stamped, topic), topic=topic.name)
    lake.create_table(dead_letters.PATH, dead_letters.SCHEMA, partition_by=["topic"])
    lake.write(lake.snapshot(dead_letters.PATH), dead, txns=[AppTxn("lakelog.ingest:events", 0)])
    result = ingest.ingest(lake, spark, topic, now=now)
    assert result.resumed and result.appended == 2
    assert len(table_rows(lake, dead_letters.PATH)) == 1  # not written twice
    assert len(table_rows(lake, topic.path)) == 2


def test_resume_after_append_committed_reports_the_recorded_counts(lake, spark, topic, now):
    drop(lake.root, topic.name, "a.ndjson", [record(1), record(1), "{bad"])
    done = ingest.ingest(lake, spark, topic, now=now)
    # Simulate a crash before step 4: put the plan back as pending.
    manifest = landing.load_manifest(lake, topic.name)
    landing._save(lake, manifest, {}, landing.IngestPlan(0, tuple(manifest.ingested)), now)
    resumed = ingest.ingest(lake, spark, topic, now=now)
    assert resumed.resumed and resumed.batch == 0
    assert (resumed.read, resumed.appended, resumed.duplicates, resumed.dead_letters) == (
        done.read, done.appended, done.duplicates, done.dead_letters,
    ) == (3, 1, 1, 1)
    assert len(table_rows(lake, topic.path)) == 1
    assert ingest.ingest(lake, spark, topic, now=now).batch is None


def test_produce_validates_like_landing_files(lake, spark, topic, now):
    lines = [json.dumps(record(1)), "oops", json.dumps(record(1))]
    result = ingest.produce(lake, spark, topic, lines, source="produce:test", now=now)
    assert (result.read, result.appended, result.duplicates, result.dead_letters) == (3, 1, 1, 1)
    (dead,) = table_rows(lake, dead_letters.PATH)
    assert dead.source == "produce:test" and dead.line == 2


@pytest.mark.parametrize("path", ["held", "spark"])
def test_payload_fields_named_value_and_error_are_records_like_any(spark, tmp_path, now,
                                                                   monkeypatch, path):
    """A held batch carries a bad line's text and error beside the envelope under names of its
    own: a topic's fields called `value` and `error` are the records' own."""
    from pyspark.sql import types as T

    from lakelog.log.topics import Topic

    monkeypatch.setattr(held_batch, "SMALL_INGEST_BYTES", -1 if path == "spark" else 1 << 30)
    schema = T.StructType([T.StructField(n, t) for n, t in [
        ("event_id", T.StringType()), ("sensor", T.StringType()), ("value", T.DoubleType()),
        ("error", T.StringType())]])
    topic = Topic("readings", schema, key="sensor", partitions=2)
    lake = EmbeddedLake(spark, str(tmp_path / "lake"))
    drop(lake.root, topic.name, "a.ndjson", [
        {"event_id": "r1", "sensor": "s1", "value": 1.5, "error": None},
        {"event_id": "r2", "sensor": "s2", "value": 2.5, "error": "drift"},
        {"event_id": "r3", "sensor": "s1", "value": "high"},
    ])
    result = ingest.ingest(lake, spark, topic, now=now)
    assert (result.read, result.appended, result.dead_letters) == (3, 2, 1)
    log = sorted((r.event_id, r.value, r.error, r.headers["line"])
                 for r in table_rows(lake, topic.path))
    assert log == [("r1", 1.5, None, "1"), ("r2", 2.5, "drift", "2")]
    (dead,) = table_rows(lake, dead_letters.PATH)
    assert dead.line == 3 and '"high"' in dead.raw and "value" in dead.reason


def test_both_paths_give_the_same_log_and_dead_letters(spark, tmp_path, now, monkeypatch):
    """Duplicates within a file, across files and against the log, bad lines, several log
    partitions and files: the held path and the Spark path append the same records with the
    same offsets, and the same dead letters."""
    first = [record(i) for i in range(30)] + [record(4), "{bad", record(31)]
    second = [record(i) for i in range(25, 60)] + [record(40), '{"event_id": 1}']
    third = [record(i, seconds=i + 0.5) for i in range(55, 90)]

    def ingested(name: str, path: str) -> tuple[list, list]:
        monkeypatch.setattr(held_batch, "SMALL_INGEST_BYTES", -1 if path == "spark" else 1 << 30)
        lake, topic = EmbeddedLake(spark, str(tmp_path / name)), make_topic()
        drop(lake.root, topic.name, "a.ndjson", first)
        ingest.ingest(lake, spark, topic, now=now)
        drop(lake.root, topic.name, "b.ndjson", second)
        drop(lake.root, topic.name, "c.ndjson", third)
        results = [ingest.ingest(lake, spark, topic, now=now)]
        assert [r.duplicates for r in results] == [12]
        log = sorted((r.partition, r.offset, r.event_id, r.key, r.event_time, r.headers["source"],
                      r.headers["line"], r.amount) for r in table_rows(lake, topic.path))
        dead = sorted(tuple(r) for r in table_rows(lake, dead_letters.PATH))
        return log, dead

    held_log, held_dead = ingested("held", "held")
    spark_log, spark_dead = ingested("spark", "spark")
    assert len(held_log) == 90 and len({p for p, *_ in held_log}) > 1
    assert held_log == spark_log
    assert len(held_dead) == 2 and held_dead == spark_dead
