"""What a consumer is: its outputs, what its transform sees and returns, and its declaration.

`lakelog.consumers.batch` runs a declared `Consumer` one exactly-once microbatch at a time.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lakelog.errors import ConfigError
from lakelog.lake import DataFile, Lake, Snapshot
from lakelog.lake.merge_on_read import MergeKeys
from lakelog.lake.nulls_apart import NULLS_APART
from lakelog.lake.one_partition import few
from lakelog.log.offsets import RangeStats
from lakelog.log.topics import Topic
from lakelog.spark import local_checkpoints

NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,99}$")


class Role(enum.Enum):
    """What an output holds, set where the output is declared, so that a reader of outputs
    (the Dagster layer's metadata) is told rather than guessing from names and columns."""

    #: The derived rows themselves (windows, joined records, aggregates, history).
    DATA = "data"
    #: A side output: records left out because they came after their window or state closed.
    LATE = "late"
    #: A side output: records or commands refused, with the reason.
    REJECTED = "rejected"
    #: The operator's own working state, read back by its next batch (a join buffer, open windows).
    STATE = "state"
    #: The current row per key of a changelog, deletes kept as tombstones (``_deleted``) for a
    #: while: its commits are counted as inserts, updates and deletes.
    COMPACTED = "compacted"


@dataclass(frozen=True)
class Output:
    """A table a consumer writes: appended to, or upserted by `keys`; its `role` says what it
    holds, for whoever reports on it.

    An upserted row replaces the stored one only if its `newer_by` column is greater (when set);
    `rows_per_file` clusters the upserted files by key range so that later upserts prune.
    With `merge_on_read` (needs `keys` and `newer_by`), rows are appended as new versions of
    their keys and readers resolve the newest (`lakelog.lake.merge_on_read`); a `lakelog.lake.squash`
    compacts them. `nulls_apart` names a column whose null and non-null rows are kept in
    separate files (`lakelog.lake.nulls_apart`).
    """

    path: str
    schema: T.StructType
    keys: tuple[str, ...] = ()
    role: Role = Role.DATA
    partition_by: tuple[str, ...] = ()
    newer_by: str | None = None
    rows_per_file: int | None = None
    merge_on_read: bool = False
    nulls_apart: str | None = None

    def __post_init__(self) -> None:
        if self.merge_on_read and not (self.keys and self.newer_by):
            raise ConfigError(f"output {self.path}: merge-on-read needs keys and newer_by")
        if self.nulls_apart and self.nulls_apart in self.partition_by:
            raise ConfigError(f"output {self.path}: nulls_apart names a column of the table's "
                              "own, not a partition column")
        if self.merge_on_read and self.partition_by:
            # Its reads tell files apart by name, which repeats across partition folders.
            raise ConfigError(f"output {self.path}: a merge-on-read table is not partitioned")

    @property
    def merge_keys(self) -> MergeKeys | None:
        """The merge keys of a merge-on-read output, else None."""
        if not self.merge_on_read:
            return None
        assert self.newer_by is not None
        return MergeKeys(self.keys, self.newer_by)

    @property
    def layout(self) -> dict[str, str]:
        """The table properties that lay out its files as declared: merge-on-read's keys and
        the column whose nulls are kept apart; the table is created with them."""
        merge = self.merge_keys
        return {**({} if merge is None else merge.properties()),
                **({NULLS_APART: self.nulls_apart} if self.nulls_apart else {})}


@dataclass(frozen=True)
class BatchInput:
    """What a transform sees: the batch's records per topic, and the outputs as they are now.

    `current` reads the very snapshot the output will be committed against, so a run that raced
    another run of the same batch cannot commit state computed from a stale read.
    `state` is the consumer's state as committed with the previous batch, `next_state` what the
    consumer's `advance` made of it for this batch (committed with it), and `now` the time the
    batch was planned: a retry sees the same time, so time-driven state (an idle watermark)
    comes out the same. `scratch` is working memory of this attempt that `advance` may fill for
    `transform` (e.g. a pass over the records both need); it is never committed. `stats` are,
    per topic, facts of the batch's records (`lakelog.log.offsets.RangeStats`) from the log's
    file statistics, or from the records when they were read in this process, or None where
    only a Spark read of the records can tell: facts a transform takes from them cost no Spark
    job. `schemas` are, per topic, the records' schema as the log's metadata gives it
    (empty: not known), so a transform need not ask Spark for it. `cut`: per topic, the log
    partitions the batch read when it took its whole `max_records_per_batch`, each of which may
    hold records past it (empty: the batch took all there was); a watermark does not pass them
    (`lakelog.consumers.event_times`).
    """

    lake: Lake
    batch: int
    records: Mapping[str, DataFrame]
    outputs: Mapping[str, Snapshot]
    now: datetime | None = None
    state: Mapping[str, Any] = field(default_factory=dict)
    next_state: Mapping[str, Any] = field(default_factory=dict)
    scratch: dict[str, Any] = field(default_factory=dict)
    stats: Mapping[str, RangeStats | None] = field(default_factory=dict)
    schemas: Mapping[str, T.StructType] = field(default_factory=dict)
    cut: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def current(self, output: Output) -> DataFrame:
        return self.lake.read(self.outputs[output.path])

    def few(self, *outputs: Output, files: Sequence[DataFile] = ()) -> bool:
        """Whether the batch's records (when their count is known: `stats`) and the stored
        rows of `outputs`, or of `files` (some of an output's), are few enough to work on in
        one partition, without shuffles (`lakelog.lake.one_partition`)."""
        stats = RangeStats.combined(self.stats.values())
        stored = [*files, *(f for o in outputs for f in self.outputs[o.path].files())]
        return stats is not None and few(stored, records=stats.records)

    def cached(self, df: DataFrame) -> DataFrame:
        """`df` computed once, now, for the writes of the outputs cut from it: a local
        checkpoint, whose rows Spark's block manager keeps and whose plan is a scan of them.

        Not `persist`: a persisted plan is optimized when cached and again in every query that
        reads it, and its columnar cache is built and then decoded; for a microbatch that cost
        more than computing the rows once (1,000-record batches, `bench_pipeline.py --parts
        kinds`: the cart fold 2.06 -> 1.18 s, a pattern's 1.57 -> 0.92 s on a classic session,
        1.89 -> 1.12 s and 1.49 -> 0.82 s over Spark Connect; benchmarks/README.md). `release`
        lets them go.
        """
        kept = df.localCheckpoint(eager=True)
        self.scratch.setdefault(_CACHED, []).append(kept)
        return kept

    def release(self) -> None:
        """Let go of the rows `cached` kept, once the batch's writes are done
        (`lakelog.spark.local_checkpoints.free`): left to Spark's cleaner, they stay until the
        JVM collects them, and meanwhile spill to disk (hundreds of MB in a measured loop)."""
        for df in self.scratch.pop(_CACHED, []):
            local_checkpoints.free(df)


_CACHED = "lakelog.cached"


@dataclass(frozen=True)
class Changes:
    """A keyed output's rows to upsert and the keys to delete, in one commit.

    A transform that read the stored rows of every key it changes may name the `files` it read
    them from, and about how many rows it upserts (`rows_hint`): the upsert then rewrites those
    files without a pass of its own over `rows` (`lakelog.lake.upsert.upsert`'s `candidates`). With
    `replace`, `rows` are the complete new content of `files` (unchanged rows included), written
    in their place without a merge (`lakelog.lake.upsert.rewrite`); unless `rows_hint` says, about
    the files' rows and one per record of the batch.
    """

    rows: DataFrame
    deletes: DataFrame | None = None
    files: Sequence[DataFile] | None = None
    rows_hint: int | None = None
    replace: bool = False


#: The batch's writes per output path; None: nothing to write (the commit still records the batch).
Transform = Callable[[BatchInput], Mapping[str, DataFrame | Changes | None]]
#: The consumer state to commit with a batch, from the batch's records and the previous state.
Advance = Callable[[BatchInput], Mapping[str, Any]]
#: Whether a consumer with no new records should still run an (empty) batch at `now`.
Tick = Callable[[Mapping[str, Any], datetime], bool]


@dataclass(frozen=True)
class Consumer:
    name: str
    topics: tuple[str, ...]
    outputs: tuple[Output, ...]
    transform: Transform
    max_records_per_batch: int = 250_000
    start: Literal["earliest", "latest"] = "earliest"
    #: Keeps consumer state (e.g. a watermark) in the checkpoint, committed with each batch.
    advance: Advance | None = None
    #: Runs an empty batch when no records arrived, e.g. to advance an idle watermark.
    idle_tick: Tick | None = None
    #: Tables the transform reads besides its topics and outputs (e.g. a join's lookup table).
    reads: tuple[str, ...] = ()
    #: Run as a consumer group (`lakelog.consumers.groups`): its log partitions are shared by
    #: the members that run, each partition with its own checkpoint; this many members by
    #: default. 0: one consumer with one checkpoint.
    members: int = 0
    #: What the outputs and state hold, by name and text (a windowed aggregate's window, emit
    #: mode, group-by columns and aggregations): kept in the checkpoint, and a batch of the
    #: consumer declared otherwise is refused (`lakelog.consumers.definitions`).
    definition: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ConfigError(
                f"consumer name {self.name!r} must be lowercase letters, digits, '_', '.', '-'"
            )
        if self.max_records_per_batch < 1:
            raise ConfigError(f"consumer {self.name}: max_records_per_batch must be >= 1")
        if not self.topics:
            raise ConfigError(f"consumer {self.name}: needs at least one topic")
        if self.members < 0:
            raise ConfigError(f"consumer {self.name}: members must be >= 0")
        if self.members and (self.advance is not None or self.idle_tick is not None):
            raise ConfigError(
                f"consumer {self.name} keeps state across its log partitions (a watermark, "
                "windows): it cannot share them among the members of a group"
            )

    @property
    def app_id(self) -> str:
        return f"lakelog.consumer:{self.name}"

    def topics_in(self, topics: Mapping[str, Topic]) -> dict[str, Topic]:
        """The declarations of the topics this consumer reads, from `topics`."""
        missing = [t for t in self.topics if t not in topics]
        if missing:
            raise ConfigError(f"consumer {self.name} reads undeclared topics: {', '.join(missing)}")
        return {t: topics[t] for t in self.topics}
