"""A pattern over keyed event sequences, declared: steps with conditions and quantifiers,
absences, a time bound and measures (a useful subset of SQL's MATCH_RECOGNIZE).

`Pattern("abandoned_carts", key=("cart_id",), elements=(Step("add", "cart_events",
"action = 'add'", "+"), Absent("order", "orders")), within=timedelta(minutes=30), ...)`:
per cart, adds with no order within 30 minutes of the first. `lakelog.patterns.matcher` has the
matching rules, `lakelog.patterns.consumer` how it runs as a consumer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from pyspark.sql import types as T

from lakelog.consumers.watermarks import Watermark, to_us
from lakelog.errors import ConfigError
from lakelog.joins.side import check_choice, check_columns, check_name
from lakelog.log.topics import Topic
from lakelog.patterns.matcher import Compiled, Element

QUANTIFIER = re.compile(r"^(?:([+*?])|\{(\d+)(,(\d*))?\})$")
Function = Literal["first", "last", "count", "min", "max", "sum"]


def quantifier(text: str | None) -> tuple[int, int | None]:
    """``None`` (exactly one), ``+``, ``*``, ``?``, ``{n}``, ``{n,}`` or ``{n,m}`` as (min, max)."""
    if text is None:
        return 1, 1
    m = QUANTIFIER.match(text)
    if not m:
        raise ConfigError(f"quantifier {text!r} must be +, *, ?, {{n}}, {{n,}} or {{n,m}}")
    if m.group(1):
        return {"+": (1, None), "*": (0, None), "?": (0, 1)}[m.group(1)]
    low = int(m.group(2))
    high = low if m.group(3) is None else (int(m.group(4)) if m.group(4) else None)
    if high is not None and (high < low or high == 0):
        raise ConfigError(f"quantifier {text!r}: needs 0 < max >= min")
    return low, high


@dataclass(frozen=True)
class Step:
    """Events of `topic` satisfying `where` (SQL over its records; None: every one), taken
    `times` times (a quantifier; None: once)."""

    name: str
    topic: str
    where: str | None = None
    times: str | None = None

    @property
    def bounds(self) -> tuple[int, int | None]:
        return quantifier(self.times)


@dataclass(frozen=True)
class Absent:
    """No event of `topic` satisfying `where` between the steps around it (at the end of the
    pattern: after the last matched event, within the window)."""

    name: str
    topic: str
    where: str | None = None


@dataclass(frozen=True)
class Measure:
    """An output column: `function` of `column` over the events a step matched (``count``
    needs no column)."""

    name: str
    step: str
    function: Function
    column: str | None = None


@dataclass(frozen=True)
class Pattern:
    name: str
    topics: tuple[Topic, ...]
    #: Columns every topic has (same types): a match is within one key.
    key: tuple[str, ...]
    elements: tuple[Step | Absent, ...]
    #: The longest a match may last, from its first event (and a trailing absence's window).
    within: timedelta
    watermark: Watermark
    measures: tuple[Measure, ...] = ()
    max_records_per_batch: int = 250_000

    def __post_init__(self) -> None:
        check_name("pattern", self.name)
        owner = f"pattern {self.name}"
        topics = {t.name: t for t in self.topics}
        if len(topics) != len(self.topics) or not topics:
            raise ConfigError(f"{owner}: needs one or more different topics")
        if not self.key:
            raise ConfigError(f"{owner}: needs a key (columns of every topic)")
        for k in self.key:
            types = {t.table_schema[k].dataType if k in t.table_schema.fieldNames() else None
                     for t in self.topics}
            if None in types or len(types) > 1:
                raise ConfigError(f"{owner}: key column {k!r} must be in every topic, with "
                                  "one type")
        names = [e.name for e in self.elements]
        if len(set(names)) != len(names):
            raise ConfigError(f"{owner}: element names repeat")
        for e in self.elements:
            if e.topic not in topics:
                raise ConfigError(f"{owner}: {e.name} reads topic {e.topic!r}, which is not "
                                  "among its topics")
        steps = [e for e in self.elements if isinstance(e, Step)]
        if not steps or not isinstance(self.elements[0], Step) or steps[0].bounds[0] < 1:
            raise ConfigError(f"{owner}: must start with a step that takes at least one event")
        for n, e in enumerate(self.elements):
            if isinstance(e, Absent):
                neighbours = self.elements[n - 1:n] + self.elements[n + 1:n + 2]
                if any(not isinstance(x, Step) or x.bounds[0] < 1 for x in neighbours):
                    raise ConfigError(f"{owner}: absence {e.name} must stand between steps that "
                                      "take at least one event each")
            else:
                e.bounds  # noqa: B018 - a bad quantifier is a ConfigError now
        if self.within <= timedelta(0):
            raise ConfigError(f"{owner}: within must be > 0")
        for m in self.measures:
            step = next((s for s in steps if s.name == m.step), None)
            if step is None:
                raise ConfigError(f"{owner}: measure {m.name} names no step {m.step!r}")
            check_choice(owner, f"measure {m.name}: function", m.function, Function)
            columns = topics[step.topic].table_schema.fieldNames()
            if m.function != "count" and m.column not in columns:
                raise ConfigError(f"{owner}: measure {m.name}: {step.topic} has no column "
                                  f"{m.column!r}")
        check_columns(owner, self.output_schema.fieldNames())

    @property
    def consumer(self):  # -> Consumer (lakelog.patterns.consumer imports this module)
        from lakelog.patterns.consumer import consumer

        return consumer(self)

    @property
    def steps(self) -> list[Step]:
        return [e for e in self.elements if isinstance(e, Step)]

    @property
    def conditions(self) -> list[Step | Absent]:
        """Every condition the matcher tests, in its flag order: the steps, then absences."""
        return [*self.steps, *(e for e in self.elements if isinstance(e, Absent))]

    def compiled(self) -> Compiled:
        flags = {e.name: n for n, e in enumerate(self.conditions)}
        elements, pending = [], []
        for e in self.elements:
            if isinstance(e, Absent):
                pending.append(flags[e.name])
            else:
                low, high = e.bounds
                elements.append(Element(flags[e.name], low, high, tuple(pending)))
                pending = []
        return Compiled(tuple(elements), tuple(pending), to_us(self.within))

    def source_type(self, m: Measure) -> T.DataType:
        """The type of the values a measure aggregates (a count's: a long per event)."""
        if m.function == "count":
            return T.LongType()
        topic = next(t for t in self.topics if t.name == self.step(m.step).topic)
        return topic.table_schema[m.column].dataType

    def measure_type(self, m: Measure) -> T.DataType:
        kind = self.source_type(m)
        if m.function == "sum":
            return T.DoubleType() if isinstance(kind, (T.FloatType, T.DoubleType)) else (
                kind if isinstance(kind, T.DecimalType) else T.LongType())
        return kind

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    @property
    def output_schema(self) -> T.StructType:
        first = self.topics[0].table_schema
        return T.StructType([
            T.StructField("match_id", T.StringType()),
            *[T.StructField(k, first[k].dataType) for k in self.key],
            T.StructField("match_start", T.TimestampType()),
            T.StructField("match_end", T.TimestampType()),
            T.StructField("events", T.LongType()),
            *[T.StructField(m.name, self.measure_type(m)) for m in self.measures],
            T.StructField("batch", T.LongType()),
            T.StructField("hour", T.TimestampType()),
        ])
