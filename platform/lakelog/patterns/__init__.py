"""Complex event processing (DDIA ch. 11): patterns over keyed event sequences — steps with
conditions and quantifiers, absences, a time bound and measures — found as the events arrive,
with partial matches kept across microbatches and decided by the watermark."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakelog.patterns.pattern import Absent, Measure, Pattern, Step, quantifier

__all__ = ["Absent", "Measure", "Pattern", "Step", "quantifier"]


def __getattr__(name: str) -> Any:
    """The pattern types, imported on first use: Spark's Python workers import this package
    for `lakelog.patterns.worker` alone, which must not bring the engine in with it."""
    if name in __all__:
        return getattr(import_module("lakelog.patterns.pattern"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
