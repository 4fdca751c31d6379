"""`WindowedAggregate`: the declaration of one incremental windowed aggregate over topics."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Literal, get_args

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lakelog.consumers import Consumer, Output, Role
from lakelog.consumers.watermarks import Watermark
from lakelog.errors import ConfigError
from lakelog.windows import schemas
from lakelog.windows.aggregates import Aggregation
from lakelog.windows.consumer import build_consumer
from lakelog.windows.kinds import Hopping, Session, Sliding, Tumbling, WindowKind

NAME = re.compile(r"^[a-z][a-z0-9_]{0,49}$")
COLUMN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
#: A window table's rows per file by default. A microbatch rewrites every file holding a window
#: it changes or finalizes, and a hopping window makes several windows of each event: 15,000
#: page views a batch into the demo's 10-minute windows every minute met one or two whole
#: 50,000-row files, 3.2 s a batch against 2.2 s with 10,000 (5,000: 2.3 s;
#: `bench_pipeline.py --records 15000`, benchmarks/README.md).
ROWS_PER_FILE = 10_000

Emit = Literal["update", "final"]
LatePolicy = Literal["drop", "correct"]
#: Maps a batch's records per topic to one DataFrame of events (see `WindowedAggregate`).
Prepare = Callable[[Mapping[str, DataFrame]], DataFrame]


@dataclass(frozen=True)
class WindowedAggregate:
    """Aggregates of events per `window` and `group_by` key, kept incrementally per microbatch.

    `prepare` maps the batch's records per topic to one DataFrame with `event_id`, `event_time`,
    the group-by columns and the aggregations' input columns (default: the single topic's
    records). A group-by entry is a column name (a string column) or a `StructField` for another
    type. `emit="update"` revises a window's row every microbatch that touches it (with
    `is_final`); `emit="final"` publishes a window once the watermark has passed its end. Records
    for windows that are already final are late: `late="drop"` keeps them out, `late="correct"`
    applies them as a correction that bumps the window's `revision`; both record them in the
    ``_late`` table. `rows_per_file` clusters the window tables by time so that a microbatch
    reads and rewrites only the files of the windows it touches: a file is rewritten whole, so
    smaller files make a microbatch cheaper, and a full scan of the table dearer.
    `prepare_keeps_time` says that `prepare` only filters, projects or unions records and keeps
    their `event_time`: the log's file statistics then give the batch's event-time span, which
    saves a pass over the events (without `prepare`, the events are the records anyway).
    """

    name: str
    topics: tuple[str, ...]
    window: WindowKind
    aggregates: tuple[Aggregation, ...]
    _: KW_ONLY
    group_by: tuple[str | T.StructField, ...] = ()
    watermark: Watermark = Watermark()
    emit: Emit = "update"
    late: LatePolicy = "drop"
    prepare: Prepare | None = None
    prepare_keeps_time: bool = False
    max_records_per_batch: int = 250_000
    rows_per_file: int | None = ROWS_PER_FILE

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise ConfigError(
                f"windowed aggregate name {self.name!r} must be lowercase letters, digits and '_'"
            )
        where = f"windowed aggregate {self.name}"
        if isinstance(self.topics, str) or not self.topics:
            raise ConfigError(f"{where}: topics must be a non-empty tuple of topic names")
        if not isinstance(self.window, (Tumbling, Hopping, Sliding, Session)):
            raise ConfigError(
                f"{where}: window must be Tumbling, Hopping, Sliding or Session, "
                f"got {self.window!r}"
            )
        if not self.aggregates or not all(isinstance(a, Aggregation) for a in self.aggregates):
            raise ConfigError(f"{where}: aggregates must be a non-empty tuple of aggregations")
        if self.emit not in get_args(Emit):
            raise ConfigError(f"{where}: emit must be 'update' or 'final', got {self.emit!r}")
        if self.late not in get_args(LatePolicy):
            raise ConfigError(f"{where}: late must be 'drop' or 'correct', got {self.late!r}")
        if not isinstance(self.watermark, Watermark):
            raise ConfigError(f"{where}: watermark must be a lakelog.consumers.watermarks.Watermark")
        if self.prepare is None and len(self.topics) != 1:
            raise ConfigError(f"{where}: reads {len(self.topics)} topics, so it needs a prepare")
        if self.max_records_per_batch < 1:
            raise ConfigError(f"{where}: max_records_per_batch must be >= 1")
        if self.rows_per_file is not None and self.rows_per_file < 1:
            raise ConfigError(f"{where}: rows_per_file must be >= 1 (or None)")
        self._check_columns(where)

    def _check_columns(self, where: str) -> None:
        for entry in self.group_by:
            name = entry.name if isinstance(entry, T.StructField) else entry
            if not isinstance(name, str) or not COLUMN.match(name):
                raise ConfigError(
                    f"{where}: group-by column {name!r} must be lowercase letters, digits and '_'"
                )
        names = [f.name for f in self.group_fields] + [a.name for a in self.aggregates]
        reserved = sorted(set(names) & set(schemas.RESERVED))
        if reserved:
            raise ConfigError(
                f"{where}: {', '.join(reserved)} are column names of the window table"
            )
        columns = [f.name for f in schemas.window_schema(self).fields]
        duplicates = sorted({c for c in columns if columns.count(c) > 1})
        if duplicates:
            raise ConfigError(f"{where}: column names used twice: {', '.join(duplicates)}")

    @property
    def group_fields(self) -> tuple[T.StructField, ...]:
        return tuple(
            g if isinstance(g, T.StructField) else T.StructField(g, T.StringType())
            for g in self.group_by
        )

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.group_fields)

    @property
    def keys(self) -> tuple[str, ...]:
        return schemas.keys(self)

    @property
    def windows(self) -> Output:
        """``streams/<name>``: every window (update) or the final ones (final)."""
        return Output(
            f"streams/{self.name}", schemas.window_schema(self), keys=self.keys,
            rows_per_file=self.rows_per_file,
        )

    @property
    def state(self) -> Output | None:
        """``_state/windows/<name>`` in final mode: windows not yet published, read each batch."""
        if self.emit != "final":
            return None
        return Output(
            f"_state/windows/{self.name}", schemas.window_schema(self), keys=self.keys,
            rows_per_file=self.rows_per_file, role=Role.STATE,
        )

    @property
    def late_records(self) -> Output:
        """``streams/<name>_late``: appended, one row per late record (and window)."""
        return Output(f"streams/{self.name}_late", schemas.late_schema(self), role=Role.LATE)

    @property
    def consumer(self) -> Consumer:
        """The consumer ``window.<name>`` that keeps the tables, batch by exactly-once batch."""
        return build_consumer(self)
