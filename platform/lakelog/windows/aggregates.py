"""Mergeable aggregations: what a window keeps, as partials that combine across microbatches.

A window table stores each aggregation's *partials* in ``_``-prefixed columns (a sum and a count
for an average, an HLL sketch for a distinct count) and derives the public value from them. A
microbatch aggregates only its own events into partials and merges them with the stored
partials of the windows it touches; it never re-reads the events of earlier batches.

Each aggregation first turns its input column into a normalized input ``_in_<name>`` of a fixed
type (declared here, not found in the data), so table schemas are known when the consumer is
declared: counts and averages need no type, `Sum`, `Min` and `Max` cast to their `dtype`, and
`ApproxDistinct` hashes the input's string form.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from pyspark.sql import Column, WindowSpec
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.errors import ConfigError

NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")

#: A partial column of one side of a merge of two rows, by the partial's name.
Side = Callable[[str], Column]


def over_difference(column: Column, upto: WindowSpec, before: WindowSpec) -> Column:
    """An additive aggregate over the rows in `upto` and not in `before` (which it holds)."""
    return F.coalesce(column.over(upto), F.lit(0)) - F.coalesce(column.over(before), F.lit(0))


def _sum_between(inp: Column, upto: WindowSpec, before: WindowSpec, *, floating: bool) -> Column:
    """SQL SUM of `inp` over the rows in `upto` and not in `before`, as a difference of sums.

    Null when no input there is not null. For floating-point inputs the difference is of the
    finite values' sums, and a NaN or infinity there gives what SUM gives (NaN for a NaN or both
    infinities, else the infinity): one that left the frame must not make it NaN. A difference
    may round the last digits otherwise than a sum of the frame's own rows."""
    n = over_difference(F.count(inp), upto, before)
    if not floating:
        return F.when(n > 0, over_difference(F.sum(inp), upto, before))
    inf = float("inf")

    def seen(condition: Column) -> Column:
        return over_difference(F.count(F.when(condition, F.lit(1))), upto, before) > 0

    nan, above, below = seen(F.isnan(inp)), seen(inp == F.lit(inf)), seen(inp == F.lit(-inf))
    finite = over_difference(F.sum(F.when(F.abs(inp) < F.lit(inf), inp)), upto, before)
    return (F.when(n == 0, F.lit(None)).when(nan | (above & below), F.lit(float("nan")))
            .when(above, F.lit(inf)).when(below, F.lit(-inf)).otherwise(finite))


def _added(a: Column, b: Column) -> Column:
    """`a + b` where both are there, else the one that is (as SQL SUM over the two)."""
    return F.coalesce(a + b, a, b)


@dataclass(frozen=True)
class Aggregation(ABC):
    """An output column `name` aggregated from input column `column` of the prepared events."""

    name: str
    column: str | None = None

    def __post_init__(self) -> None:
        kind = type(self).__name__
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise ConfigError(
                f"{kind} aggregation name {self.name!r} must be lowercase letters, digits and '_', "
                "starting with a letter"
            )
        if self.needs_column and not self.column:
            raise ConfigError(f"{kind} aggregation {self.name}: needs an input column")

    @property
    def needs_column(self) -> bool:
        return True

    @property
    def input_name(self) -> str:
        return f"_in_{self.name}"

    @abstractmethod
    def input_type(self) -> T.DataType:
        """The type of the normalized input."""

    @abstractmethod
    def input(self) -> Column:
        """The normalized input, from the prepared events' `column`."""

    @abstractmethod
    def partials(self) -> tuple[T.StructField, ...]:
        """The partial columns kept in the window table."""

    @abstractmethod
    def aggregate(self, inp: Column) -> list[Column]:
        """Aggregate functions (in `partials` order, cast by the caller) over normalized inputs;
        plain aggregate functions, so they also work over a window frame."""

    def between(self, inp: Column, upto: WindowSpec, before: WindowSpec) -> list[Column] | None:
        """The `aggregate` partials over the rows of frame `upto` that are not in `before`, as
        differences of aggregates over the two (in `partials` order, cast by the caller); None
        when an aggregate cannot be taken back that way (a least value, a sketch).

        A sliding window's frame ``(t - size, t]`` is all rows up to ``t`` less all rows up to
        ``t - size``: Spark aggregates a frame that only grows in one pass, where one that also
        loses rows at the back is aggregated anew at every row (`lakelog.windows.sliding`)."""
        return None

    @abstractmethod
    def merge(self) -> list[Column]:
        """Aggregate functions (in `partials` order, cast by the caller) over stored partials."""

    @abstractmethod
    def combine(self, old: Side, new: Side) -> list[Column]:
        """Row-wise expressions (in `partials` order, cast by the caller) merging the partials
        of two rows, either of which may be missing (all its partials null): what `merge`
        gives over the two."""

    @abstractmethod
    def value_type(self) -> T.DataType:
        """The type of the public value."""

    @abstractmethod
    def value(self) -> Column:
        """The public value, from the partial columns."""

    def _partial(self, suffix: str) -> str:
        return f"_{self.name}_{suffix}"


@dataclass(frozen=True)
class Count(Aggregation):
    """Events in the window; with `column`, events whose `column` is not null (SQL COUNT)."""

    @property
    def needs_column(self) -> bool:
        return False

    def input_type(self) -> T.DataType:
        return T.BooleanType()

    def input(self) -> Column:
        if self.column is None:
            return F.lit(True)
        return F.when(F.col(self.column).isNotNull(), F.lit(True))

    def partials(self) -> tuple[T.StructField, ...]:
        return (T.StructField(self._partial("count"), T.LongType()),)

    def aggregate(self, inp: Column) -> list[Column]:
        return [F.count(inp)]

    def between(self, inp: Column, upto: WindowSpec, before: WindowSpec) -> list[Column] | None:
        return [over_difference(F.count(inp), upto, before)]

    def merge(self) -> list[Column]:
        return [F.sum(self._partial("count"))]

    def combine(self, old: Side, new: Side) -> list[Column]:
        return [_added(old(self._partial("count")), new(self._partial("count")))]

    def value_type(self) -> T.DataType:
        return T.LongType()

    def value(self) -> Column:
        return F.coalesce(F.col(self._partial("count")), F.lit(0).cast("long"))


@dataclass(frozen=True)
class _Typed(Aggregation):
    _: KW_ONLY
    dtype: T.DataType = field(default_factory=T.DoubleType)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.dtype, T.AtomicType):
            raise ConfigError(
                f"{type(self).__name__} aggregation {self.name}: dtype must be an atomic Spark "
                f"type, got {self.dtype!r}"
            )

    def input_type(self) -> T.DataType:
        return self.dtype

    def input(self) -> Column:
        return F.col(str(self.column)).cast(self.dtype)

    def value_type(self) -> T.DataType:
        return self.dtype


@dataclass(frozen=True)
class Sum(_Typed):
    """The sum of `column` as `dtype` (default double); null when every input is null."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.dtype, T.NumericType):
            raise ConfigError(f"Sum aggregation {self.name}: dtype must be numeric")

    def partials(self) -> tuple[T.StructField, ...]:
        return (T.StructField(self._partial("sum"), self.dtype),)

    def aggregate(self, inp: Column) -> list[Column]:
        return [F.sum(inp)]

    def between(self, inp: Column, upto: WindowSpec, before: WindowSpec) -> list[Column] | None:
        floating = isinstance(self.dtype, (T.FloatType, T.DoubleType))
        return [_sum_between(inp, upto, before, floating=floating)]

    def merge(self) -> list[Column]:
        return [F.sum(self._partial("sum"))]

    def combine(self, old: Side, new: Side) -> list[Column]:
        return [_added(old(self._partial("sum")), new(self._partial("sum")))]

    def value(self) -> Column:
        return F.col(self._partial("sum"))


@dataclass(frozen=True)
class Min(_Typed):
    """The least value of `column` as `dtype` (default double)."""

    def partials(self) -> tuple[T.StructField, ...]:
        return (T.StructField(self._partial("min"), self.dtype),)

    def aggregate(self, inp: Column) -> list[Column]:
        return [F.min(inp)]

    def merge(self) -> list[Column]:
        return [F.min(self._partial("min"))]

    def combine(self, old: Side, new: Side) -> list[Column]:
        return [F.least(old(self._partial("min")), new(self._partial("min")))]

    def value(self) -> Column:
        return F.col(self._partial("min"))


@dataclass(frozen=True)
class Max(_Typed):
    """The greatest value of `column` as `dtype` (default double)."""

    def partials(self) -> tuple[T.StructField, ...]:
        return (T.StructField(self._partial("max"), self.dtype),)

    def aggregate(self, inp: Column) -> list[Column]:
        return [F.max(inp)]

    def merge(self) -> list[Column]:
        return [F.max(self._partial("max"))]

    def combine(self, old: Side, new: Side) -> list[Column]:
        return [F.greatest(old(self._partial("max")), new(self._partial("max")))]

    def value(self) -> Column:
        return F.col(self._partial("max"))


@dataclass(frozen=True)
class Avg(Aggregation):
    """The mean of `column` (double), kept as a sum and a count so that it merges exactly."""

    def input_type(self) -> T.DataType:
        return T.DoubleType()

    def input(self) -> Column:
        return F.col(str(self.column)).cast("double")

    def partials(self) -> tuple[T.StructField, ...]:
        return (
            T.StructField(self._partial("sum"), T.DoubleType()),
            T.StructField(self._partial("n"), T.LongType()),
        )

    def aggregate(self, inp: Column) -> list[Column]:
        return [F.sum(inp), F.count(inp)]

    def between(self, inp: Column, upto: WindowSpec, before: WindowSpec) -> list[Column] | None:
        return [_sum_between(inp, upto, before, floating=True),
                over_difference(F.count(inp), upto, before)]

    def merge(self) -> list[Column]:
        return [F.sum(self._partial("sum")), F.sum(self._partial("n"))]

    def combine(self, old: Side, new: Side) -> list[Column]:
        return [_added(old(p), new(p)) for p in (self._partial("sum"), self._partial("n"))]

    def value_type(self) -> T.DataType:
        return T.DoubleType()

    def value(self) -> Column:
        n = F.col(self._partial("n"))
        return F.when(n > 0, F.col(self._partial("sum")) / n)


@dataclass(frozen=True)
class ApproxDistinct(Aggregation):
    """An estimate of the distinct values of `column`, from a mergeable HLL sketch.

    `lg_config_k` trades sketch size for accuracy (12: ~1.6% standard error); the estimate is
    exact for small counts. Values are hashed in their string form.
    """

    _: KW_ONLY
    lg_config_k: int = 12

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 4 <= self.lg_config_k <= 21:
            raise ConfigError(f"ApproxDistinct aggregation {self.name}: lg_config_k must be 4..21")

    def input_type(self) -> T.DataType:
        return T.StringType()

    def input(self) -> Column:
        return F.col(str(self.column)).cast("string")

    def partials(self) -> tuple[T.StructField, ...]:
        return (T.StructField(self._partial("hll"), T.BinaryType()),)

    def aggregate(self, inp: Column) -> list[Column]:
        return [F.hll_sketch_agg(inp, self.lg_config_k)]

    def merge(self) -> list[Column]:
        return [F.hll_union_agg(self._partial("hll"))]

    def combine(self, old: Side, new: Side) -> list[Column]:
        a, b = old(self._partial("hll")), new(self._partial("hll"))
        return [F.when(a.isNull(), b).when(b.isNull(), a).otherwise(F.hll_union(a, b))]

    def value_type(self) -> T.DataType:
        return T.LongType()

    def value(self) -> Column:
        sketch = F.col(self._partial("hll"))
        return F.when(sketch.isNotNull(), F.hll_sketch_estimate(sketch)).otherwise(F.lit(0))
