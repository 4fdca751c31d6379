"""Running a model: a temporary view, a full recompute, or an incremental merge.

An incremental run, in this order:

1. **pin** — snapshot every input once and the model's table; everything below reads exactly
   these versions.
2. **state** — read from the table's last commit which input versions it reflects (`state`);
   without one (first run, edited SQL, a new or recreated input) rebuild from scratch.
3. **changes** — the inputs' change data feed from those versions to the pinned ones gives the
   hours or keys to recompute (`incremental`); recompute them from the pinned inputs.
4. **commit** — one Delta commit: the rewritten files, the recomputed rows, and the pinned input
   versions as application transactions.

A crash before step 4 commits nothing, and the next run starts again from the same state; after
step 4 the state says those changes are applied, so they are never applied twice. Recomputing a
unit replaces its rows as a whole, so a retry reading newer inputs still converges to the full
refresh. Two runs planned on the same table version conflict: one fails without writing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.errors import ChangesUnavailableError, ConfigError, SchemaMismatchError
from lakelog.lake import Lake, Snapshot, driver_write
from lakelog.lake.driver_write import is_small_write
from lakelog.views import held_keys
from lakelog.views.errors import MissingInputError
from lakelog.views.evaluate import Reader, evaluate, spark_errors
from lakelog.views.graph import ModelGraph
from lakelog.views.incremental import (
    HOUR,
    held_changed_rows,
    hour_files,
    hour_reader,
    in_hours,
    key_files,
    matching,
    replace,
    touched_hours,
    touched_keys,
    utc,
    whole_reader,
)
from lakelog.views.models import Model
from lakelog.views.progress import load_state, state_txns

Mode = Literal["view", "full", "incremental", "unchanged"]


@dataclass(frozen=True)
class ModelRun:
    """What a run did. `touched` counts the hours or keys an incremental run recomputed."""

    model: str
    mode: Mode
    reason: str
    inputs: Mapping[str, int] = field(default_factory=dict)
    version: int | None = None
    previous_version: int | None = None
    touched: int | None = None
    #: The hours an incremental run of an hourly model recomputed.
    hours: tuple[datetime, ...] = ()

    def as_metadata(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "reason": self.reason, "input_versions": dict(self.inputs),
            "version": self.version, "touched": self.touched,
        }


def _pin(lake: Lake, model: Model, paths: Collection[str]) -> dict[str, Snapshot]:
    missing = tuple(p for p in paths if not lake.exists(p))
    if missing:
        raise MissingInputError(
            f"{model.file}: input {', '.join(missing)} does not exist yet; materialize it first",
            missing,
        )
    return {p: lake.snapshot(p) for p in paths}


def run_model(
    lake: Lake,
    spark: SparkSession,
    graph: ModelGraph,
    name: str,
    *,
    full_refresh: bool = False,
    hours: Collection[datetime] = (),
) -> ModelRun:
    """Materialize model `name`. `hours` (hour-partitioned models only) are recomputed besides
    whatever the inputs' changes touch, as a backfill of those time partitions does."""
    model = graph.models[name]
    if hours and model.config.partition_by != "hour":
        raise ConfigError(f"{model.file}: hours apply only to a model with partition_by='hour'")
    with spark_errors(model):
        pinned = _pin(lake, model, graph.inputs(name))
        versions = _versions(pinned)

        read = whole_reader(lake, pinned)

        def everything() -> DataFrame:
            return evaluate(spark, graph, name, read)  # analysed, not executed

        if not model.stored:
            _register_view(lake, spark, model, pinned, everything)
            return ModelRun(name, "view", "a view is recomputed on every read", versions)
        if full_refresh:
            return _full(lake, model, everything(), pinned, "full refresh requested")
        if not lake.exists(model.path):
            return _full(lake, model, everything(), pinned, "first run")
        output = lake.snapshot(model.path)
        state, reason = load_state(output, model, pinned)
        table = model.config.materialized == "table"
        unchanged = state is not None and all(state[p] == v for p, v in versions.items())
        if unchanged and not hours and not (table and model.volatile):
            return ModelRun(name, "unchanged", "no input changed since the last run", versions,
                            output.version, output.version, 0)
        if table:
            why = "its SQL reads the clock or randomness" if model.volatile else (
                reason if state is None else "an input changed")
            return _full(lake, model, everything(), pinned, f"a table is recomputed in full: {why}")
        if state is None:
            return _full(lake, model, everything(), pinned, reason)
        ranges = {p: (state[p], v) for p, v in versions.items() if v > state[p]}
        hourly = model.config.partition_by == "hour"
        try:
            if hourly:
                found = touched_hours(lake, spark, ranges, {p: pinned[p].schema for p in ranges})
            else:
                changes = {p: held_changed_rows(lake, pinned[p], ranges[p][0]) for p in ranges}
        except ChangesUnavailableError as gone:  # e.g. vacuumed since the last run
            return _full(lake, model, everything(), pinned, f"rebuilt: {gone}")
        if hourly:
            if found is None:
                return _full(lake, model, everything(), pinned,
                             "an input without a time column changed, so every hour may have")
            asked = {utc(h) for h in hours}
            return _hours(lake, spark, graph, model, output, pinned, frozenset(found) | asked,
                          whole=read, changed=None if asked - set(found) else sum(found.values()))
        return _keys(lake, spark, graph, model, output, read, pinned, everything(), changes)


#: Per session, what each temporary view was last registered as: its SQL and the exact input
#: snapshots it reads. The same again needs no new registration, which would have Spark
#: analyse the same plan again (tens of milliseconds of a pipeline step that has nothing new).
_VIEWS: dict[int, tuple[SparkSession, dict[str, tuple]]] = {}


def _register_view(
    lake: Lake,
    spark: SparkSession,
    model: Model,
    pinned: Mapping[str, Snapshot],
    everything: Callable[[], DataFrame],
) -> None:
    definition = (model.template, model.inlined, tuple(sorted(
        (lake.uri(p), s.table_id, s.version) for p, s in pinned.items())))
    _, views = _VIEWS.setdefault(id(spark), (spark, {}))
    if views.get(model.name) != definition or not spark.catalog.tableExists(model.name):
        everything().createOrReplaceTempView(model.name)
        views[model.name] = definition


def _metadata(model: Model, mode: Mode, versions: Mapping[str, int], touched: int | None):
    return {"lakelog.view": {"model": model.name, "mode": mode, "touched": touched,
                             "inputs": dict(versions)}}


def _versions(pinned: Mapping[str, Snapshot]) -> dict[str, int]:
    return {p: s.version for p, s in pinned.items()}


def _full(
    lake: Lake, model: Model, rows: DataFrame, pinned: Mapping[str, Snapshot], reason: str
) -> ModelRun:
    """Rebuild the table from `rows`. A table with other columns (the model's SELECT changed) is
    replaced by an empty one with the new columns first: a new Delta table id, which tells the
    incremental models reading it to rebuild too."""
    versions = _versions(pinned)
    try:
        lake.create_table(model.path, rows.schema)
    except SchemaMismatchError:
        lake.replace_table(model.path, rows.schema)
    output = lake.snapshot(model.path)
    keys = model.config.unique_key
    if keys:  # hour first: later incremental runs then find an hour's rows in few files
        rows = rows.sortWithinPartitions(*sorted(keys, key=lambda k: k != HOUR))
    version = lake.write(
        output, rows, mode="overwrite", txns=state_txns(model, output, pinned),
        metadata=_metadata(model, "full", versions, None),
    )
    return ModelRun(model.name, "full", reason, versions, version, output.version)


def _state_only(
    lake: Lake, model: Model, output: Snapshot, pinned: Mapping[str, Snapshot]
) -> ModelRun:
    """Inputs moved without touching anything the model reads: record that, write no rows."""
    versions = _versions(pinned)
    version = lake.write(output, None, txns=state_txns(model, output, pinned),
                         metadata=_metadata(model, "incremental", versions, 0))
    return ModelRun(model.name, "incremental", "the inputs' changes touch no rows", versions,
                    version, output.version, 0)


def _hours(
    lake: Lake,
    spark: SparkSession,
    graph: ModelGraph,
    model: Model,
    output: Snapshot,
    pinned: Mapping[str, Snapshot],
    hours: frozenset[datetime],
    *,
    whole: Reader,
    changed: int | None,
) -> ModelRun:
    """Recompute `hours`, whose inputs' changed rows number `changed` (None: not known, as for
    an hour a backfill asks for); an input without a time column is read whole by `whole`."""
    versions = _versions(pinned)
    if not hours:
        return _state_only(lake, model, output, pinned)
    recomputed = evaluate(spark, graph, model.name, hour_reader(lake, pinned, hours, whole))
    stray = (
        f"{model.file}: partition_by='hour' but the recomputed hours produced a row of another "
        "hour; its hour column must be date_trunc('hour', event_time) of the input rows it "
        "comes from"
    )
    checked = recomputed.withColumn(  # fails the write, so nothing is committed
        HOUR, F.when(in_hours(HOUR, hours), F.col(HOUR)).otherwise(F.raise_error(F.lit(stray)))
    )
    candidates = hour_files(output, hours)
    # About: the rows of the rewritten files (those of the hours among them), and a new row per
    # changed input row (more for a model that explodes or joins them: the hint only chooses
    # collecting the rows, up to `driver_write.SMALL_WRITE_ROWS`, over a Spark write).
    rows_hint = None if changed is None else sum(f.num_records for f in candidates) + changed
    txns = state_txns(model, output, pinned)
    metadata = _metadata(model, "incremental", versions, len(hours))
    if is_small_write(rows_hint) and held_keys.holds(output, [HOUR, *model.config.unique_key]):
        table, actual = driver_write.collect(checked)
        touched = pa.table({HOUR: pa.array(sorted(hours), pa.timestamp("us", tz="UTC"))})
        version = held_keys.replace(
            lake, output, touched, table, actual, [HOUR],
            order=[HOUR, *(k for k in model.config.unique_key if k != HOUR)],
            txns=txns, metadata=metadata,
        )
    else:
        units = spark.createDataFrame([(h,) for h in sorted(hours)],
                                      T.StructType([T.StructField(HOUR, T.TimestampType())]))
        version = replace(lake, output, checked, units, [HOUR], candidates, txns=txns,
                          metadata=metadata, rows_hint=rows_hint)
    return ModelRun(model.name, "incremental", f"{len(hours)} hour(s) recomputed", versions,
                    version, output.version, len(hours), tuple(sorted(hours)))


def _keys(
    lake: Lake,
    spark: SparkSession,
    graph: ModelGraph,
    model: Model,
    output: Snapshot,
    read: Reader,
    pinned: Mapping[str, Snapshot],
    rows: DataFrame,
    changes: Mapping[str, DataFrame],
) -> ModelRun:
    versions = _versions(pinned)
    keys = model.config.unique_key
    units = touched_keys(spark, graph, model.name, read, changes, keys)
    held = held_keys.collect(units, rows, keys) if held_keys.holds(output, keys) else None
    if held is not None:
        touched, recomputed, actual = held
        if not touched.num_rows:
            return _state_only(lake, model, output, pinned)
        version = held_keys.replace(
            lake, output, touched, recomputed, actual, keys, order=keys,
            txns=state_txns(model, output, pinned),
            metadata=_metadata(model, "incremental", versions, touched.num_rows),
        )
        return ModelRun(model.name, "incremental", f"{touched.num_rows} key(s) recomputed",
                        versions, version, output.version, touched.num_rows)
    units = units.persist()
    try:
        candidates, touched = key_files(output, units, keys)
        if not touched:
            return _state_only(lake, model, output, pinned)
        recomputed = rows.join(units, matching(rows, units, keys), "left_semi")
        version = replace(
            lake, output, recomputed, units, keys, candidates,
            txns=state_txns(model, output, pinned),
            metadata=_metadata(model, "incremental", versions, touched),
            # a row per unique key: the candidates' rows and one per touched key at most
            rows_hint=sum(f.num_records for f in candidates) + touched,
        )
    finally:
        units.unpersist()
    return ModelRun(model.name, "incremental", f"{touched} key(s) recomputed", versions, version,
                    output.version, touched)


def model_rows(lake: Lake, spark: SparkSession, model: Model, run: ModelRun) -> DataFrame:
    """The rows a run left: the temporary view, or the table at the version the run wrote."""
    if not model.stored:
        return spark.table(model.name)
    return lake.read(lake.snapshot(model.path, run.version))
