"""Offset resets that keep derived data right: a replay into keyed or windowed outputs is refused,
and a rebuild from the retained log equals a fresh consumer's outputs."""

from __future__ import annotations

import dataclasses
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from engine_helpers import BASE, TOTALS, CrashAfterCommit, add_to_totals, drop, make_topic, record
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from lakelog import consumers
from lakelog.consumers import Consumer, Output
from lakelog.consumers import checkpoints
from lakelog.consumers.resets import rebuild_consumer, reset_consumer
from lakelog.consumers.watermarks import Watermark
from lakelog.demo.pipeline import pipeline as shop
from lakelog.errors import ConsumerBusyError, DefinitionChangedError, UnsafeReplayError
from lakelog.lake import EmbeddedLake
from lakelog.log import ingest
from lakelog.pipeline import Pipeline
from lakelog.windows import Count, Sum, Tumbling, WindowedAggregate
from lakelog.windows.replay import write_replay

EVENTS = make_topic()
COPY = Output("streams/copy", T.StructType([T.StructField("event_id", T.StringType())]))



PIPELINE = Pipeline(
    "resets",
    topics=[EVENTS],
    consumers=[
        Consumer("totals", ("events",), (TOTALS,), add_to_totals, max_records_per_batch=15),
        Consumer("copy", ("events",), (COPY,),
                 lambda batch: {COPY.path: batch.records["events"].select("event_id")}),
    ],
    windows=[WindowedAggregate(
        "per_ten_seconds", ("events",), Tumbling(timedelta(seconds=10)),
        (Count("events"), Sum("amount", "amount")), group_by=("product_id",),
        watermark=Watermark(lateness=timedelta(seconds=5)), max_records_per_batch=15,
    )],
)
WINDOW = "window.per_ten_seconds"


def clock() -> datetime:
    return datetime.now(timezone.utc)


def land(lake, spark, first: int, last: int, now: datetime) -> None:
    drop(lake.root, "events", f"{first}.ndjson", [record(i) for i in range(first, last)])
    ingest.ingest(lake, spark, EVENTS, now=now)


def catch_up(lake, *names: str) -> None:
    for name in names:
        consumers.run_until_caught_up(lake, PIPELINE.consumer(name), PIPELINE.all_topics,
                                      now=clock)


def lag(lake, name: str) -> int:
    return sum(p.lag for p in consumers.lag(lake, PIPELINE.consumer(name), PIPELINE.all_topics))


def rows(lake, path: str, drop_columns=("revision", "batch")):
    table = lake.read(lake.snapshot(path))
    return table.drop(*[c for c in drop_columns if c in table.columns])


def test_the_declaration_says_what_a_replay_would_double():
    [keyed] = PIPELINE.replay_hazards("totals")
    assert "streams/totals is keyed by product_id" in keyed
    window = PIPELINE.replay_hazards(WINDOW)
    assert any("streams/per_ten_seconds is keyed" in h for h in window)
    assert any("watermark" in h for h in window)
    assert PIPELINE.replay_hazards("copy") == ()  # plain appends take a replay
    assert shop.replay_hazards("tables.customers") == ()  # upserts ordered by position
    assert shop.replay_hazards("aggregate.cart")  # its cart state folds commands again


def test_a_reset_that_would_count_twice_is_refused(lake, spark, now):
    land(lake, spark, 0, 40, now)
    catch_up(lake, "totals", "copy")

    with pytest.raises(UnsafeReplayError, match=r"would replay 40 records it has consumed: "
                       r"streams/totals is keyed by product_id.*--rebuild"):
        reset_consumer(lake, PIPELINE, "totals", to="earliest", now=now)
    assert lag(lake, "totals") == 0  # nothing moved

    land(lake, spark, 40, 45, now)
    reset_consumer(lake, PIPELINE, "totals", to="latest", now=now)  # skips: nothing replayed
    assert lag(lake, "totals") == 0
    reset_consumer(lake, PIPELINE, "copy", to="earliest", now=now)  # appends again, by design
    assert lag(lake, "copy") == 45


def test_a_rebuilt_consumer_equals_a_fresh_one(lake, spark, now, tmp_path):
    land(lake, spark, 0, 25, now)
    catch_up(lake, "totals", WINDOW)  # in batches of 15
    land(lake, spark, 25, 40, now)
    catch_up(lake, "totals", WINDOW)
    fresh = EmbeddedLake(spark, str(tmp_path / "fresh"))
    shutil.copytree(Path(lake.root) / "log", Path(fresh.root) / "log")  # the same log, alone
    catch_up(fresh, "totals", WINDOW)

    for name in ("totals", WINDOW):
        rebuilt = rebuild_consumer(lake, PIPELINE, name, to="earliest", now=now)
        assert set(rebuilt.offsets.values()) == {0}
        assert all(lake.read(lake.snapshot(p)).count() == 0 for p in rebuilt.emptied)
        assert checkpoints.load(lake, name).state == {}  # the watermark is forgotten too
        assert lag(lake, name) == 40
    assert set(rebuild_consumer(lake, PIPELINE, WINDOW, to="earliest", now=now).emptied) == {
        "streams/per_ten_seconds", "streams/per_ten_seconds_late"}  # a second time is harmless
    catch_up(lake, "totals", WINDOW)

    assertDataFrameEqual(rows(lake, TOTALS.path), rows(fresh, TOTALS.path))
    assertDataFrameEqual(rows(lake, "streams/per_ten_seconds"),
                         rows(fresh, "streams/per_ten_seconds"))
    assert rows(lake, TOTALS.path).agg(F.sum("n")).first()[0] == 40  # counted once
    states = [checkpoints.load(lk, WINDOW).state for lk in (lake, fresh)]
    assert [(s["watermark_us"], s["max_event_us"]) for s in states] == [
        (states[1]["watermark_us"], states[1]["max_event_us"])] * 2  # arrival_us: wall clock


def test_a_rebuild_waits_for_a_batch_in_progress(lake, spark, now):
    land(lake, spark, 0, 10, now)
    failing = Consumer("totals", ("events",), (TOTALS,), lambda batch: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        consumers.run_batch(lake, failing, PIPELINE.all_topics, now=now)
    with pytest.raises(ConsumerBusyError, match="batch 0 in progress"):
        rebuild_consumer(lake, PIPELINE, "totals", to="earliest", now=now)


def test_a_consumer_whose_decisions_were_published_is_not_rebuilt(lake, now):
    with pytest.raises(UnsafeReplayError, match="aggregate.cart cannot be rebuilt: its decided "
                       "events were relayed to topic cart_orders"):
        rebuild_consumer(lake, shop, "aggregate.cart", to="earliest", now=now)


def declared(**changes) -> Pipeline:
    """`PIPELINE` with its windowed aggregate declared otherwise."""
    [window] = PIPELINE.windows
    return Pipeline("resets", topics=[EVENTS], windows=[dataclasses.replace(window, **changes)])


def test_a_window_declared_otherwise_is_refused_until_rebuilt(lake, spark, now, tmp_path):
    land(lake, spark, 0, 25, now)
    catch_up(lake, WINDOW)
    land(lake, spark, 25, 40, now)
    final = declared(emit="final")
    before = checkpoints.load(lake, WINDOW)
    windows = lake.snapshot("streams/per_ten_seconds").version
    # Final mode would publish again the windows update mode wrote: refused before it plans.
    with pytest.raises(DefinitionChangedError, match=r"emit 'update' -> 'final'.*lakelog offsets "
                       r"reset window.per_ten_seconds --to earliest --rebuild"):
        consumers.run_batch(lake, final.consumer(WINDOW), final.all_topics, now=now)
    after = checkpoints.load(lake, WINDOW)
    assert (after.plan, after.batch, after.committed) == (None, before.batch, before.committed)
    assert lake.snapshot("streams/per_ten_seconds").version == windows
    with pytest.raises(DefinitionChangedError, match=r"window 'Tumbling\(size=0:00:10\)' -> "
                       r"'Tumbling\(size=0:01:00\)'"):
        consumers.run_batch(lake, declared(window=Tumbling(timedelta(minutes=1))).consumer(WINDOW),
                            PIPELINE.all_topics, now=now)
    # A later lateness leaves the stored windows what they were: taken.
    later = declared(watermark=Watermark(lateness=timedelta(seconds=8)))
    assert consumers.run_batch(lake, later.consumer(WINDOW), later.all_topics, now=now)

    # A backfill's replay holds the earlier declaration's windows: emptied with the rest.
    live = lake.read(lake.snapshot("streams/per_ten_seconds"))
    write_replay(lake, PIPELINE.windows[0], live, start=BASE, end=BASE + timedelta(hours=1))
    rebuilt = rebuild_consumer(lake, final, WINDOW, to="earliest", now=now)
    assert "replays/per_ten_seconds" in rebuilt.emptied
    assert lake.read(lake.snapshot("replays/per_ten_seconds")).isEmpty()
    assert checkpoints.load(lake, WINDOW).state == {}
    consumers.run_until_caught_up(lake, final.consumer(WINDOW), final.all_topics, now=clock)
    assert checkpoints.load(lake, WINDOW).state["definition"]["emit"] == "final"
    fresh = EmbeddedLake(spark, str(tmp_path / "fresh"))
    shutil.copytree(Path(lake.root) / "log", Path(fresh.root) / "log")
    consumers.run_until_caught_up(fresh, final.consumer(WINDOW), final.all_topics, now=clock)
    assertDataFrameEqual(rows(lake, "streams/per_ten_seconds"),
                         rows(fresh, "streams/per_ten_seconds"))


def test_a_batch_planned_under_a_declaration_is_finished_under_it(lake, spark, now):
    land(lake, spark, 0, 10, now)
    crashing = CrashAfterCommit(spark, lake.root, "streams/per_ten_seconds")
    crashing.armed = True  # the first batch ever: its plan keeps the definition it was made by
    with pytest.raises(RuntimeError, match="crash after committing"):
        consumers.run_batch(crashing, PIPELINE.consumer(WINDOW), PIPELINE.all_topics, now=now)
    wider = declared(window=Tumbling(timedelta(seconds=20)))
    with pytest.raises(DefinitionChangedError, match="Batch 0 was planned under the earlier "
                       "definition and is not finished"):
        consumers.run_batch(lake, wider.consumer(WINDOW), wider.all_topics, now=now)
    assert consumers.run_batch(lake, PIPELINE.consumer(WINDOW), PIPELINE.all_topics,
                               now=now).resumed
