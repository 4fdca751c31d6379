"""Source values as JSON-native values of a change event, by declared column type.

Sources hand over text (PostgreSQL's output functions, SQLite's ``json_object``) or Python values
(SQLite snapshot reads); both become the same JSON value, so a snapshot row and a streamed
change of an unchanged row are equal. Numerics stay `Decimal` (written as exact JSON numbers by
`envelope.dumps`), timestamps become ISO-8601 UTC strings with microseconds.

A value that does not fit its declared type (text in an integer column of SQLite, an infinite
timestamp) is passed on as its source text rather than stopping the capture: the ingest of the
topic then turns the record into a dead letter with the reason, and nothing is lost silently.
Non-finite doubles and numerics are written as the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"`` (JSON has no such numbers; Spark's JSON reader accepts these strings as doubles).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from lakelog.cdc.source_tables import SourceColumn

_TRUE = frozenset({"t", "true", "1", "y", "yes", "on"})
_FALSE = frozenset({"f", "false", "0", "n", "no", "off"})


def iso_utc(moment: datetime) -> str:
    """``2026-03-01T12:00:00.123456Z``; a naive datetime is taken as UTC."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
        f"{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}Z"
    )


def _integer(value: Any, column: SourceColumn) -> int:
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    return int(value)


def _non_finite(text: str) -> str:
    lower = text.lower().lstrip("+")
    if lower in ("nan", "-nan"):
        return "NaN"
    return "-Infinity" if lower.startswith("-") else "Infinity"


def _double(value: Any, column: SourceColumn) -> float | str:
    number = float(value)
    if math.isfinite(number):
        return number
    return _non_finite(repr(number))


def _numeric(value: Any, column: SourceColumn) -> Decimal | str:
    if isinstance(value, float):
        value = repr(value)  # the shortest text that round-trips, not the binary expansion
    number = Decimal(str(value).strip())
    if not number.is_finite():
        return _non_finite(str(number))
    with localcontext() as ctx:
        ctx.prec = column.precision or 38
        ctx.traps[InvalidOperation] = True
        return number.quantize(Decimal(1).scaleb(-(column.scale or 0)))


def _boolean(value: Any, column: SourceColumn) -> bool:
    if isinstance(value, (bool, int)) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(value)


def _timestamp(value: Any, column: SourceColumn) -> str:
    if not isinstance(value, datetime):
        text = str(value).strip()
        value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    return iso_utc(value)


def _text(value: Any, column: SourceColumn) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)


_CONVERT: dict[str, Callable[[Any, SourceColumn], Any]] = {
    "bigint": _integer,
    "integer": _integer,
    "double": _double,
    "numeric": _numeric,
    "boolean": _boolean,
    "timestamp": _timestamp,
    "text": _text,
}


def to_json(column: SourceColumn, value: Any) -> Any:
    """The event value of a source value (text or Python) of `column`; None stays None."""
    if value is None:
        return None
    try:
        return _CONVERT[column.type](value, column)
    except (ValueError, TypeError, ArithmeticError, OverflowError):
        return _text(value, column)


def row_to_json(columns: tuple[SourceColumn, ...], values: tuple | list) -> dict[str, Any]:
    """A row (values in column order) as the JSON object of an event's before/after."""
    return {c.name: to_json(c, v) for c, v in zip(columns, values)}
