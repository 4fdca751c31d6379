"""Declarations: validation, table schemas and keys, the consumer, file pruning, the demo."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pyspark.sql import types as T
from windows_helpers import at

from lakelog.consumers.watermarks import to_us
from lakelog.demo.shop import TOPICS
from lakelog.demo.shop_windows import WINDOWS
from lakelog.errors import ConfigError
from lakelog.lake import DataFile
from lakelog.windows import (
    ApproxDistinct,
    Avg,
    Count,
    Hopping,
    Max,
    Session,
    Sliding,
    Sum,
    Tumbling,
    WindowedAggregate,
)
from lakelog.windows.frames import check_events
from lakelog.windows.pruning import files_to_read

MINUTE = timedelta(minutes=1)


def declare(**overrides) -> WindowedAggregate:
    options = {
        "name": "w", "topics": ("t",), "window": Tumbling(MINUTE),
        "aggregates": (Count("n"), Sum("s", "x")), "group_by": ("g",),
    }
    options.update(overrides)
    return WindowedAggregate(**options)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Tumbling(timedelta(0)), "positive"),
        (lambda: Tumbling(60), "timedelta"),
        (lambda: Hopping(MINUTE, 2 * MINUTE), "longer than size"),
        (lambda: Hopping(10 * MINUTE, 3 * MINUTE), "whole multiple"),
        (lambda: Sliding(-MINUTE), "positive"),
        (lambda: Session(timedelta(microseconds=0.5)), "positive"),
        (lambda: Count("Bad Name"), "lowercase"),
        (lambda: Sum("s"), "needs an input column"),
        (lambda: Sum("s", "x", dtype=T.StringType()), "numeric"),
        (lambda: Max("m", "x", dtype=T.ArrayType(T.LongType())), "atomic"),
        (lambda: ApproxDistinct("d", "x", lg_config_k=30), "4..21"),
        (lambda: declare(name="Bad-Name"), "lowercase"),
        (lambda: declare(topics=()), "non-empty"),
        (lambda: declare(topics=("a", "b")), "needs a prepare"),
        (lambda: declare(window=MINUTE), "Tumbling, Hopping"),
        (lambda: declare(aggregates=()), "non-empty"),
        (lambda: declare(emit="append"), "emit must be"),
        (lambda: declare(late="keep"), "late must be"),
        (lambda: declare(group_by=("window_start",)), "window_start are column names"),
        (lambda: declare(aggregates=(Count("batch"),)), "batch are column names"),
        (lambda: declare(aggregates=(Count("n"), Sum("n", "x"))), "used twice: n"),
        (lambda: declare(group_by=("Product",)), "group-by column"),
        (lambda: declare(max_records_per_batch=0), "max_records_per_batch"),
        (lambda: declare(rows_per_file=0), "rows_per_file"),
    ],
)
def test_bad_declarations_are_config_errors(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_table_schemas_and_keys_per_window_kind():
    customer = T.StructField("customer_id", T.LongType())
    aggregates = (Avg("mean", "x"), ApproxDistinct("users", "u"))
    fixed = declare(aggregates=aggregates, group_by=(customer,))
    sliding = declare(aggregates=aggregates, window=Sliding(MINUTE))
    session = declare(aggregates=aggregates, window=Session(MINUTE))

    assert fixed.keys == ("window_start", "customer_id")
    assert sliding.keys == ("window_start", "g", "event_id")
    assert session.keys == ("window_start", "g")
    assert fixed.windows.schema.fieldNames() == [
        "customer_id", "window_start", "window_end", "mean", "users", "is_final", "revision",
        "batch", "hour", "_mean_sum", "_mean_n", "_users_hll",
    ]
    assert fixed.windows.schema["customer_id"].dataType == T.LongType()
    assert fixed.windows.schema["_users_hll"].dataType == T.BinaryType()
    assert sliding.windows.schema.fieldNames()[3] == "event_id"
    assert sliding.windows.schema.fieldNames()[-2:] == ["_in_mean", "_in_users"]
    assert "duration_seconds" in session.windows.schema.fieldNames()
    assert fixed.late_records.schema.fieldNames() == [
        "event_id", "event_time", "customer_id", "window_start", "window_end", "watermark",
        "reason", "policy", "batch",
    ]


def test_consumer_names_outputs_in_commit_order():
    update, final = declare(), declare(name="f", emit="final")
    assert update.consumer.name == "window.w"
    assert [o.path for o in update.consumer.outputs] == ["streams/w_late", "streams/w"]
    # The table the transform reads is committed last, so a retry recomputes from it unchanged.
    assert [o.path for o in final.consumer.outputs] == [
        "streams/f_late", "streams/f", "_state/windows/f",
    ]
    assert final.consumer.outputs[2].keys == final.keys == ("window_start", "g")
    assert update.state is None and update.consumer.idle_tick is not None


def window_file(name: str, start_s: float, end_s: float, last_end_s: float) -> DataFile:
    """A data file of windows starting in [start_s, end_s] and ending up to `last_end_s`."""
    return DataFile(
        path=name, size=1, num_records=1,
        min_values={"window_start": at(start_s), "window_end": at(start_s + 60)},
        max_values={"window_start": at(end_s), "window_end": at(last_end_s)},
    )


FILES = [
    window_file("old", 0, 540, 600),
    window_file("recent", 600, 1140, 1200),
    window_file("newest", 1200, 1740, 1800),
]


def chosen(agg, events_s=None, before_s=None, after_s=None) -> list[str]:
    us = lambda s: None if s is None else to_us(at(s))  # noqa: E731
    span = None if events_s is None else (us(events_s[0]), us(events_s[1]))
    files = files_to_read(
        agg, FILES, events_us=span, watermark_before_us=us(before_s), watermark_after_us=us(after_s)
    )
    return [f.path for f in files]


def test_pruning_reads_only_the_files_a_batch_can_change_or_finalize():
    tumbling = declare()
    assert chosen(tumbling, events_s=(1250, 1300)) == ["newest"]
    assert chosen(tumbling, events_s=(1190, 1300)) == ["recent", "newest"]
    # A window ending at the old watermark was already made final.
    assert chosen(tumbling, before_s=1200, after_s=1300) == ["recent", "newest"]
    assert chosen(tumbling, before_s=1300, after_s=1300) == []
    assert chosen(tumbling) == []
    sliding = declare(window=Sliding(timedelta(seconds=100)))
    assert chosen(sliding, events_s=(1250, 1260)) == ["recent", "newest"]
    session = declare(window=Session(timedelta(seconds=30)))
    assert chosen(session, events_s=(1210, 1220)) == ["newest"]
    assert chosen(session, events_s=(1190, 1220)) == ["recent", "newest"]
    assert chosen(session, events_s=(1500, 1520)) == ["newest"]


def test_a_late_record_does_not_have_final_fixed_windows_read_under_drop():
    # One record of the batch is from long ago (second 100): under 'drop' it is late for every
    # window, and a file whose windows all ended by the earlier watermark cannot change.
    for window in (Tumbling(MINUTE), Hopping(size=2 * MINUTE, hop=MINUTE)):
        dropping = declare(window=window)
        assert chosen(dropping, events_s=(100, 1300), before_s=1250, after_s=1300) == ["newest"]
        assert chosen(dropping, events_s=(100, 1300), before_s=1200, after_s=1300) == [
            "recent", "newest"]  # "recent"'s last window ends at 1200 itself: within the slack
        correcting = declare(window=window, late="correct")
        assert chosen(correcting, events_s=(100, 1300), before_s=1250, after_s=1300) == [
            "old", "recent", "newest"]
        # No watermark yet (a first batch): nothing is final.
        assert chosen(dropping, events_s=(100, 1300)) == ["old", "recent", "newest"]
    # A sliding row is an input of later frames, and a session may merge: read as before.
    for window in (Sliding(timedelta(seconds=100)), Session(timedelta(seconds=30))):
        assert "old" in chosen(declare(window=window), events_s=(100, 1300), before_s=1250,
                               after_s=1300)


def test_demo_windows_are_valid_and_prepare_their_events(spark):
    assert set(WINDOWS) == {
        "revenue_per_minute", "product_views_10m", "order_value_rolling", "user_sessions",
    }
    assert {w.emit for w in WINDOWS.values()} == {"update", "final"}
    assert {type(w.window) for w in WINDOWS.values()} == {Tumbling, Hopping, Sliding, Session}
    names = [w.consumer.name for w in WINDOWS.values()]
    assert len(set(names)) == 4 and all(n.startswith("window.") for n in names)
    for agg in WINDOWS.values():
        assert set(agg.topics) <= set(TOPICS)
        records = {
            t: spark.createDataFrame([], TOPICS[t].table_schema) for t in agg.topics
        }
        events = agg.prepare(records) if agg.prepare else records[agg.topics[0]]
        check_events(agg, events)  # raises if prepare lacks a column the aggregate needs
