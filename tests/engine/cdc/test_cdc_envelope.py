"""Change events: JSON values per column type, exact numerics, positions, key changes."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from lakelog.cdc import SourceColumn, SourceTable, dumps, event, position
from lakelog.cdc.envelope import Origin, _object, epoch_ms, row_changes
from lakelog.cdc.source import mark_last
from lakelog.cdc.values import to_json

PRICE = SourceColumn("price", "numeric", precision=10, scale=2)
TS = SourceColumn("x", "timestamp")


@pytest.mark.parametrize(
    ("column", "raw", "value"),
    [
        (SourceColumn("x", "bigint"), "9007199254740993", 9007199254740993),
        (SourceColumn("x", "integer"), 42, 42),
        (SourceColumn("x", "integer"), "forty-two", "forty-two"),  # text: a dead letter later
        (SourceColumn("x", "double"), "0.1", 0.1),
        (SourceColumn("x", "double"), "0.30000000000000004", 0.30000000000000004),
        (SourceColumn("x", "double"), "Infinity", "Infinity"),
        (SourceColumn("x", "double"), float("nan"), "NaN"),
        (PRICE, "12.5", Decimal("12.50")),
        (PRICE, 12.5, Decimal("12.50")),
        (PRICE, "NaN", "NaN"),
        (SourceColumn("x", "numeric", precision=4, scale=2), "123.45", "123.45"),  # too wide
        (SourceColumn("x", "boolean"), "t", True),
        (SourceColumn("x", "boolean"), 0, False),
        (SourceColumn("x", "timestamp"), "2026-03-01 12:00:00.5", "2026-03-01T12:00:00.500000Z"),
        (SourceColumn("x", "timestamp"), "2026-03-01 12:00:00", "2026-03-01T12:00:00.000000Z"),
        (TS, "2026-03-01T14:00:00+02:00", "2026-03-01T12:00:00.000000Z"),
        (TS, datetime(2026, 3, 1, 12, 0, 0, 123456), "2026-03-01T12:00:00.123456Z"),
        (SourceColumn("x", "timestamp"), "infinity", "infinity"),
        (SourceColumn("x", "text"), "ünïcødé", "ünïcødé"),
        (SourceColumn("x", "text"), None, None),
    ],
)
def test_source_values_become_json_values(column, raw, value):
    converted = to_json(column, raw)
    assert converted == value and type(converted) is type(value)
    if isinstance(value, Decimal):
        assert str(converted) == str(value)  # the scale too


ORIGIN = Origin("postgresql", "shop", "db", "public")


def test_dumps_writes_numerics_exactly_and_round_trips():
    row = {"id": 1, "price": Decimal("12.50"), "big": Decimal("12345678.90"), "ratio": 0.1,
           "name": 'Zoë "quoted"\n', "ok": True, "none": None}
    line = dumps(event(ORIGIN, "t", "c", None, row, ts_ms=1, source_ts_ms=2, lsn=3, commit_lsn=4))
    assert '"price":12.50,' in line and '"big":12345678.90,' in line
    assert "\n" not in line and line.isascii()
    parsed = json.loads(line, parse_float=Decimal)
    assert parsed["after"] == row | {"ratio": Decimal("0.1")}
    assert str(parsed["after"]["price"]) == "12.50"
    assert list(parsed) == ["before", "after", "op", "ts_ms", "source"]
    assert parsed["source"] == {
        "version": "lakelog-0.1.0", "connector": "postgresql", "name": "shop", "ts_ms": 2,
        "snapshot": "false", "db": "db", "schema": "public", "table": "t", "txId": None,
        "lsn": 3, "commit_lsn": 4, "seq": None,
    }


def test_both_encoders_write_the_same_line():
    row = {"id": 1, "ratio": 0.1, "name": "Zoë", "ok": False, "none": None, "big": 2**70}
    line = dumps(event(ORIGIN, "t", "c", None, row, ts_ms=1, source_ts_ms=2, lsn=3, commit_lsn=4))
    assert line == _object(json.loads(line))  # the C encoder's line, and the exact encoder's


@pytest.mark.parametrize("bad", [float("nan"), Decimal("Infinity"), object()])
def test_dumps_refuses_what_json_cannot_hold(bad):
    with pytest.raises((ValueError, TypeError)):
        dumps({"x": bad})


def test_postgres_position_orders_by_commit_then_change_lsn():
    row = {"id": 1}
    snapshot = event(ORIGIN, "t", "r", None, row, ts_ms=0, source_ts_ms=0, lsn=100, commit_lsn=100)
    # Written before the consistent point (lsn 90), committed after it (commit end 120).
    late_commit = event(ORIGIN, "t", "u", row, row, ts_ms=0, source_ts_ms=0, lsn=90, commit_lsn=120)
    assert position(late_commit) > position(snapshot)
    assert late_commit["source"]["lsn"] < snapshot["source"]["lsn"]  # lsn alone would misorder


def test_sqlite_position_is_the_sequence():
    origin = Origin("sqlite", "shop", "shop", "main")
    a = event(origin, "t", "c", None, {"id": 1}, ts_ms=0, source_ts_ms=0, seq=9)
    b = event(origin, "t", "u", {"id": 1}, {"id": 1}, ts_ms=0, source_ts_ms=0, seq=10)
    assert position(a) == (9,) < position(b)


def test_key_changing_update_is_a_delete_and_an_insert():
    table = SourceTable("t", (SourceColumn("id", "bigint"), SourceColumn("v", "text")), ("id",))
    assert row_changes(table, "u", {"id": 1, "v": "a"}, {"id": 2, "v": "a"}) == [
        ("d", {"id": 1, "v": "a"}, None),
        ("c", None, {"id": 2, "v": "a"}),
    ]
    assert row_changes(table, "u", {"id": 1, "v": "a"}, {"id": 1, "v": "b"}) == [
        ("u", {"id": 1, "v": "a"}, {"id": 1, "v": "b"})
    ]


def test_last_snapshot_event_is_flagged_last():
    events = [
        event(ORIGIN, "t", "r", None, {"id": i}, ts_ms=0, source_ts_ms=0, snapshot="true")
        for i in range(3)
    ]
    flags = [e["source"]["snapshot"] for e in mark_last(iter(events))]
    assert flags == ["true", "true", "last"]
    assert list(mark_last(iter([]))) == []


def test_epoch_ms_takes_naive_as_utc():
    moment = datetime(2026, 3, 1, 12, 0, 0, 123456)
    assert epoch_ms(moment) == epoch_ms(moment.replace(tzinfo=timezone.utc)) == 1772366400123
