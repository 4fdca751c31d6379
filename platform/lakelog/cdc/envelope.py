"""Change events in Debezium's JSON envelope (the value written with ``schemas.enable=false``).

An event is ``{"before", "after", "op", "ts_ms", "source"}``: ``op`` is ``c`` (insert), ``u``
(update), ``d`` (delete) or ``r`` (snapshot read); ``ts_ms`` is when lakelog captured it and
``source.ts_ms`` when the source committed it (SQLite: when the trigger recorded it; snapshot
rows: when the snapshot was read).

Positions: the order of the changes of one key must be recoverable from the events alone, since
files can be ingested in any order and a changelog is compacted "newest position wins".
`position` gives the ordering key of an event:

- PostgreSQL: ``source.lsn`` is the change's own LSN (Debezium's meaning) and ``source.commit_lsn``
  (a lakelog extension) the LSN just past its transaction's commit record (pgoutput's commit
  *end* LSN, which is also where the slot is advanced to). Logical decoding emits whole
  transactions in commit order, so the key is ``(commit_lsn, lsn)``. Ordering by ``lsn`` alone is
  wrong: a transaction that wrote before the slot's consistent point but committed after it has
  change LSNs *below* the consistent point. Snapshot rows get ``commit_lsn = lsn = `` the
  consistent point; every streamed transaction commits at or after it, so its commit end is
  strictly greater (the commit record's start LSN could equal the consistent point, which is why
  the end is used).
- SQLite: ``source.seq`` is the change table's AUTOINCREMENT sequence. SQLite runs one writer at a
  time, so sequence order is commit order. Snapshot rows get the highest sequence assigned when
  the snapshot was read, and every streamed change has a larger one.

An update that changes the primary key becomes a delete of the old key and an insert of the new
one (as Debezium does), so that every event belongs to exactly one key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from json.encoder import encode_basestring_ascii
from typing import Any, Literal

from lakelog import __version__
from lakelog.cdc.source_tables import SourceTable

Op = Literal["c", "u", "d", "r"]
SnapshotFlag = Literal["true", "last", "false"]
Connector = Literal["postgresql", "sqlite"]
Row = dict[str, Any]

VERSION = f"lakelog-{__version__}"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Origin:
    """The fixed part of an event's ``source`` block: which server, database and schema."""

    connector: Connector
    name: str  # the logical server name, a prefix for the source's topics in Debezium
    db: str
    schema: str


def epoch_ms(moment: datetime) -> int:
    """Milliseconds since the epoch; a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // _MS



def event(
    origin: Origin,
    table: str,
    op: Op,
    before: Row | None,
    after: Row | None,
    *,
    ts_ms: int,
    source_ts_ms: int,
    snapshot: SnapshotFlag = "false",
    tx_id: int | None = None,
    lsn: int | None = None,
    commit_lsn: int | None = None,
    seq: int | None = None,
) -> dict[str, Any]:
    """One change event (a plain dict, JSON-native except `Decimal` numerics)."""
    return {
        "before": before,
        "after": after,
        "op": op,
        "ts_ms": ts_ms,
        "source": {
            "version": VERSION,
            "connector": origin.connector,
            "name": origin.name,
            "ts_ms": source_ts_ms,
            "snapshot": snapshot,
            "db": origin.db,
            "schema": origin.schema,
            "table": table,
            "txId": tx_id,
            "lsn": lsn,
            "commit_lsn": commit_lsn,
            "seq": seq,
        },
    }


def row_changes(
    table: SourceTable, op: Op, before: Row | None, after: Row | None
) -> list[tuple[Op, Row | None, Row | None]]:
    """``(op, before, after)`` of one source change; a key-changing update is split in two."""
    if op == "u" and before is not None and after is not None:
        if table.key(before) != table.key(after):
            return [("d", before, None), ("c", None, after)]
    return [(op, before, after)]


def position(event: Mapping[str, Any]) -> tuple[int, ...]:
    """The ordering key of an event among the events of its key (see the module docstring)."""
    source = event["source"]
    if source["connector"] == "postgresql":
        return (source["commit_lsn"], source["lsn"])
    return (source["seq"],)


_KEYS: dict[str, str] = {}  # encoded keys with their colon: column names repeat in every event


def _key(key: str) -> str:
    encoded = _KEYS.get(key)
    if encoded is None:
        if not isinstance(key, str):
            raise TypeError(f"JSON object keys must be strings, not {type(key).__name__}")
        encoded = encode_basestring_ascii(key) + ":"
        if len(_KEYS) < 10_000:
            _KEYS[key] = encoded
    return encoded


def _value(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"cannot write the non-finite number {value!r} as JSON")
        return format(value, "f")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write the non-finite number {value!r} as JSON")
        return float.__repr__(value)
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, Mapping):
        return _object(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join([_value(item) for item in value]) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _object(value: Mapping[str, Any]) -> str:
    return "{" + ",".join([_key(k) + _value(v) for k, v in value.items()]) + "}"


_C_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False, check_circular=False).encode


def dumps(event: Mapping[str, Any]) -> str:
    """One NDJSON line (no newline), numerics written exactly: `Decimal("12.50")` → ``12.50``.

    The C encoder of `json` writes events without decimals; it cannot write a number from
    text, so events with a `Decimal` (it raises TypeError) take the exact Python encoder.
    """
    try:
        return _C_ENCODE(event)
    except TypeError:
        return _object(event)
