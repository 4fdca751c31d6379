"""Model assets: one per SQL model of ``dbt_like_views/``, depending on what it refs.

The models are loaded and checked when the definitions are built, so a bad model (unknown ref,
cycle, unparseable config, duplicate name) fails the code location with its file and problem.
A model's warning checks (value ranges, row-count change, unique key) run on the rows the run
just wrote, inside the asset, and never stop downstream models. A run whose rows are those an
earlier evaluation validated (the same table version; for a view, the same SQL over the same input
versions) reports that evaluation again instead of validating the same rows twice.
"""

from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from pydantic import Field

from lakelog.assets.errors import engine_errors
from lakelog.assets.naming import CATCH_UP_TAG, output_key, topic_key
from lakelog.assets.partitions import HOUR_KEY, HOURLY
from lakelog.assets.quality import check_result
from lakelog.consumers import Consumer
from lakelog.lake import Lake
from lakelog.log.topics import Topic
from lakelog.quality.names import model_checks
from lakelog.resources import LakeResource, SparkResource
from lakelog.views import (
    MissingInputError,
    Model,
    ModelGraph,
    ModelRun,
    load_models,
    model_rows,
    run_model,
)
from lakelog.views.progress import fingerprint

FINISHED = {AssetCheckExecutionRecordStatus.SUCCEEDED, AssetCheckExecutionRecordStatus.FAILED}


class ViewConfig(dg.Config):
    full_refresh: bool = Field(
        default=False,
        description="Rebuild the model from scratch instead of merging its inputs' changes.",
    )


def lakelog_tables(
    topics: Mapping[str, Topic], consumers: Mapping[str, Consumer]
) -> dict[str, dg.AssetKey]:
    """The tables models may ref: every topic's log and every consumer output, by path."""
    tables = {t.path: topic_key(t) for t in topics.values()}
    tables.update({o.path: output_key(o) for c in consumers.values() for o in c.outputs})
    return tables


def _hours(context: dg.AssetExecutionContext) -> list[datetime]:
    window = context.partition_time_window
    hours, hour = [], window.start
    while hour < window.end:
        hours.append(hour)
        hour += timedelta(hours=1)
    return hours


def _row_count(lake: Lake, model: Model, version: int | None) -> int | None:
    if not model.stored or version is None:
        return None
    return sum(f.num_records for f in lake.snapshot(model.path, version).files())


def _rows_validated(model: Model, run: ModelRun) -> str | None:
    """Names the rows a run left, so that equal names mean equal rows; None if no name can
    (SQL that reads the clock or randomness)."""
    if model.volatile:
        return None
    if model.stored:
        return f"{model.path} v{run.version}"
    inputs = ", ".join(f"{p} v{v}" for p, v in sorted(run.inputs.items()))
    return f"view {model.name} (sql {fingerprint(model):x}) over {inputs}"


def _earlier_evaluations(
    instance: dg.DagsterInstance, key: dg.AssetKey, names: list[str], rows: str | None
) -> list[dg.AssetCheckResult] | None:
    """The last evaluation of each check, if every one validated `rows` (the latest record is
    this run's own, still planned: the last finished one is asked for)."""
    if rows is None:
        return None
    found = []
    for name in names:
        [record] = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(key, name), limit=1, status=FINISHED) or [None]
        evaluation = record.event.asset_check_evaluation if record and record.event else None
        validated = evaluation.metadata.get("validated") if evaluation else None
        if validated is None or validated.value != rows:
            return None
        found.append(dg.AssetCheckResult(
            asset_key=key, check_name=name, passed=evaluation.passed,
            severity=evaluation.severity, description=evaluation.description,
            metadata={**evaluation.metadata, "evaluated_by_run": record.run_id},
        ))
    return found


def _description(model: Model) -> str:
    return (
        f"{model.config.materialized} model `{model.file}`\n\n```sql\n{model.sql.strip()}\n```"
    )


def model_asset(
    graph: ModelGraph, name: str, tables: Mapping[str, dg.AssetKey]
) -> dg.AssetsDefinition:
    """The asset of model `name`: runs it, reports the run, then its warning checks."""
    model = graph.models[name]
    key = dg.AssetKey(model.path.split("/"))
    deps = [tables[r] if "/" in r else dg.AssetKey(["views", r]) for r in model.refs]
    checks = [dg.AssetCheckSpec(c, asset=key) for c in model_checks(model)]
    partitioned = model.config.partition_by == "hour"

    # skippable: in a catch-up run, a model whose input no step has written yet (a consumer
    # selected in the same run had nothing to consume) waits, and what reads it is skipped
    @dg.multi_asset(
        name=key.to_python_identifier(),
        specs=[dg.AssetSpec(
            key, deps=deps, group_name=model.folder,
            kinds={"spark", "delta"} if model.stored else {"spark"},
            description=_description(model), skippable=True,
            metadata={"file": model.file, "materialized": model.config.materialized},
        )],
        partitions_def=HOURLY if partitioned else None,
        backfill_policy=dg.BackfillPolicy.single_run() if partitioned else None,
        check_specs=checks,
        can_subset=True,
    )
    def _model(
        context: dg.AssetExecutionContext, config: ViewConfig, lake: LakeResource,
        spark: SparkResource,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        the_lake, session = lake.open(), spark.session()
        catching_up = context.run.tags.get(CATCH_UP_TAG) == "true"
        # A backfill or a run for chosen hours recomputes them; a catch-up run's hour is a label.
        asked = partitioned and not catching_up
        with engine_errors():
            try:
                run: ModelRun = run_model(
                    the_lake, session, graph, name, full_refresh=config.full_refresh,
                    hours=_hours(context) if asked else (),
                )
            except MissingInputError as exc:
                if not catching_up:  # a run asked for by hand fails, saying what to materialize
                    raise
                context.log.warning(f"model {name} waits: nothing has written "
                                    f"{', '.join(exc.paths)} yet")
                return
        context.log.info(f"model {name}: {run.mode} ({run.reason})")
        metadata = run.as_metadata()
        rows = _row_count(the_lake, model, run.version)
        if rows is not None:
            metadata["dagster/row_count"] = rows
        yield dg.MaterializeResult(metadata=metadata)
        if partitioned:  # hours the run recomputed besides its own: they were materialized too
            own = set(context.partition_keys)
            for hour in run.hours:
                other = hour.strftime(HOUR_KEY)
                if other not in own and HOURLY.has_partition_key(other):
                    context.log_event(dg.AssetMaterialization(
                        asset_key=key, partition=other,
                        metadata={"mode": run.mode, "version": run.version,
                                  "recomputed_by": f"the run for {', '.join(sorted(own))}"},
                    ))
        rows_validated = _rows_validated(model, run)
        if checks:
            earlier = _earlier_evaluations(context.instance, key, [c.name for c in checks],
                                           rows_validated)
            if earlier is not None:
                yield from earlier
                return
            from lakelog.quality.suites import model_suites
            from lakelog.quality.validate import validate

            previous = _row_count(the_lake, model, run.previous_version)
            with engine_errors():
                outcomes = validate(
                    model_rows(the_lake, session, model, run),
                    model_suites(model, previous_rows=previous),
                )
            for outcome in outcomes:
                yield check_result(outcome, asset_key=key, version=run.version,
                                   validated=rows_validated)

    return _model


def view_definitions(
    models_dir: str | Path, tables: Mapping[str, dg.AssetKey]
) -> list[dg.AssetsDefinition]:
    """One asset per model below `models_dir`; `tables` are the lakelog tables models may ref
    (path → asset key, see `lakelog_tables`). Raises `ModelError` naming the file of a bad model."""
    return model_assets(load_models(models_dir, tables.keys()), tables)


def model_assets(
    graph: ModelGraph, tables: Mapping[str, dg.AssetKey]
) -> list[dg.AssetsDefinition]:
    """One asset per model of an already loaded `graph` (see `view_definitions`)."""
    return [model_asset(graph, name, tables) for name in graph.models]
