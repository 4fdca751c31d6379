"""What a suite found, as plain data: per expectation its GX type, arguments, success, observed
value, unexpected count and a sample of the unexpected values or rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

#: Unexpected values or rows kept per expectation.
SAMPLE = 10


def plain(value: Any) -> Any:
    """`value` as JSON-able data: timestamps as ISO text, decimals as text, rows as dicts."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if hasattr(value, "asDict"):
        return plain(value.asDict(recursive=True))
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


@dataclass(frozen=True)
class ExpectationOutcome:
    expectation: str
    arguments: Mapping[str, Any]
    success: bool
    observed_value: Any = None
    unexpected_count: int | None = None
    unexpected_sample: tuple[Any, ...] = ()
    description: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return plain(asdict(self))


@dataclass(frozen=True)
class SuiteOutcome:
    """A suite's results; `blocking` says whether a failure should stop downstream work."""

    suite: str
    blocking: bool
    results: tuple[ExpectationOutcome, ...]
    description: str | None = None

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)

    @property
    def failures(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(r for r in self.results if not r.success)
