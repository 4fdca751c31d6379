"""The pipeline sensor: one run per tick for everything with new input, and what lags.

Each tick finds the roots — assets with new input, from metadata only (`lakelog.sensors.roots`)
— and requests ONE run of the pipeline job selecting them and everything downstream of them;
Dagster runs the steps in dependency order, and a downstream step with nothing new finishes
quickly. While a pipeline run is queued no other is requested: it takes what arrives meanwhile.
While one is in progress, the next is requested as soon as input arrives that the run will not
take — landing files after its ingest, source changes after its capture — so that it waits in
Dagster's run queue and starts as the run ends, not a tick later: the instance must hold it
there (`queues_behind`: the run queue allows one run tagged `lakelog/catch_up` at a time, as
deploy/dagster.yaml does); on any other instance the next run is requested once the run has
ended.
The run key is a digest of the work found, and the cursor keeps the last one, so the same state
is never requested twice. Every tick also reports consumer lag
as observations (`lakelog.sensors.observations`), except that while a run holds the pipeline
lag is looked up at most every `OBSERVE_EVERY_S` seconds: the ticks come every 5 s (each loop
of Dagster's sensor daemon, `INTERVAL_S`), so that a run follows the end of the last one within
seconds, and a tick in the middle of a run need not read every consumer's metadata again.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import dagster as dg

from lakelog.assets.gates import NOT_STARTED
from lakelog.assets.naming import CATCH_UP_TAG
from lakelog.assets.pipeline import PIPELINE, LiveGraph
from lakelog.resources import LakeResource, SourceResource
from lakelog.sensors.cursors import digest
from lakelog.sensors.observations import lag_values, observations
from lakelog.sensors.roots import Found, find_inputs, find_roots

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

#: Run statuses that hold the pipeline: a run queued or under way.
ACTIVE = [*NOT_STARTED, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


#: While a pipeline run is queued or in progress, how often a tick looks up lag (seconds).
OBSERVE_EVERY_S = 10.0
#: The sensor's default interval. Dagster's sensor daemon loops every 5 s and evaluates a sensor
#: whose interval has passed: with an interval of 5 s, a few milliseconds of drift skip every
#: other loop (ticks came 5 or 10 s apart, measured), so it is just under the loop's period.
INTERVAL_S = 4


def _held(active: dg.DagsterRun) -> str:
    if active.status in NOT_STARTED:
        return (f"pipeline run {active.run_id} is {active.status.value.lower()}: it takes what "
                "arrives until it starts")
    return (f"pipeline run {active.run_id} is {active.status.value.lower()}: one run at a time; "
            "the next is requested once input arrives that it will not take, or after it")


def _observed_lately(cursor: dict[str, Any], now: datetime) -> bool:
    at = cursor.get("observed_at")
    age = None if at is None else (now - datetime.fromisoformat(at)).total_seconds()
    return age is not None and 0 <= age < OBSERVE_EVERY_S


def _active_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    records = instance.get_run_records(dg.RunsFilter(job_name=PIPELINE, statuses=ACTIVE))
    return [r.dagster_run for r in records]


def queues_behind(instance: dg.DagsterInstance) -> bool:
    """Whether a pipeline run requested while another is in progress waits in the queue until
    it has ended: Dagster's run queue limits the runs tagged `CATCH_UP_TAG` (the sensor's, and
    their retries) to one at a time (deploy/dagster.yaml)."""
    queue = instance.get_concurrency_config().run_queue_config
    return queue is not None and any(
        limit.get("key") == CATCH_UP_TAG and limit.get("value") is None
        and limit.get("limit") == 1 for limit in queue.tag_concurrency_limits or ())


def _untaken(found: Found, marks: dict[str, Any]) -> list[str]:
    """The inputs with new input in `found` that the run requested with `marks` does not take:
    it took its share since (the mark moved), or did not select the input."""
    return sorted(label for label, (_, mark) in found.marks.items()
                  if label in found.work and (label not in marks or marks[label] != mark))


def _marks(found: Found, selected: set[dg.AssetKey]) -> dict[str, Any]:
    """The marks of the inputs a run of `selected` takes."""
    return {label: mark for label, (key, mark) in found.marks.items() if key in selected}


def pipeline_sensor(
    live: LiveGraph, job: "UnresolvedAssetJobDefinition", *,
    minimum_interval_seconds: int = INTERVAL_S,
) -> dg.SensorDefinition:
    """The sensor of `job` (`live.job()`); it starts running with the code location.

    A tick every `minimum_interval_seconds` (default 4: each loop of the daemon) keeps a landed
    file's way into every derived table short. Its cursor is ``{"requested": <run key>,
    "marks": {input root: what the requested run moves on taking it}, "observed": {consumer:
    values}, "observed_at": <when>}``.
    """

    def evaluate(
        context: dg.SensorEvaluationContext, lake: LakeResource, source: SourceResource | None
    ) -> dg.SensorResult:
        now = datetime.now(timezone.utc)
        last: dict[str, Any] = json.loads(context.cursor or "{}")
        runs = _active_runs(context.instance)
        active = next((r for r in runs if r.status in NOT_STARTED), runs[0] if runs else None)
        the_lake, root = lake.open(), lake.resolved_root()
        inputs, untaken = None, []
        if active is not None and active.status not in NOT_STARTED and queues_behind(
                context.instance):  # in progress: input it will not take is the next run's
            inputs = find_inputs(live, the_lake, source, root=root, now=now)
            untaken = _untaken(inputs, last.get("marks", {}))
        if active is not None and not untaken and _observed_lately(last, now):  # cursor kept
            return dg.SensorResult(skip_reason=_held(active) + "; lag was looked up "
                                   f"less than {OBSERVE_EVERY_S:g} s ago")
        found = find_roots(live, the_lake, context.instance, source, root=root, now=now,
                           inputs=inputs)
        values = {name: lag_values(b, state, now) for name, (b, state) in found.backlogs.items()}
        events = observations(live.consumers, values, last.get("observed", {}))
        cursor = {"requested": last.get("requested"), "marks": last.get("marks", {}),
                  "observed": values, "observed_at": now.isoformat()}

        def skip(reason: str) -> dg.SensorResult:
            return dg.SensorResult(skip_reason=reason, asset_events=events,
                                   cursor=json.dumps(cursor, sort_keys=True))

        if active is not None and not untaken:
            return skip(_held(active))
        notes = "".join(f"; {n}" for n in found.notes)
        if not found.roots:
            return skip("nothing new" + notes)
        run_key = digest(found.work)
        if run_key == cursor["requested"]:
            return skip(f"this work was requested already (run key {run_key}){notes}")
        roots = set(found.roots)
        if untaken:  # it takes whatever input arrives until it starts, as a run waiting does
            roots |= live.inputs
            found.notes.append(f"queued behind run {active.run_id}, which will not take "
                               f"{', '.join(untaken)}")
        selected, left_out = live.runnable(live.closure(roots), the_lake.exists)
        found.notes.extend(left_out)
        context.log.info(f"new input: {', '.join(sorted(found.work))}; "
                         f"{len(selected)} assets{''.join(f'; {n}' for n in found.notes)}")
        cursor["requested"] = run_key
        cursor["marks"] = _marks(found, selected)
        return dg.SensorResult(
            run_requests=[dg.RunRequest(
                run_key=run_key,
                asset_selection=sorted(selected, key=lambda k: k.to_user_string()),
                # without it Dagster runs every check of the selected assets, the audits too
                asset_check_keys=live.checks_of(selected),
                partition_key=live.partition_key(selected, now),
                tags={CATCH_UP_TAG: "true"},
            )],
            asset_events=events,
            cursor=json.dumps(cursor, sort_keys=True),
        )

    sensor = dg.sensor(
        name=PIPELINE,
        job=job,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Requests one pipeline run for the assets with new input — landing files, "
        "source changes, log offsets, decided orders, changed model inputs — and everything "
        "downstream of them; reports consumer lag as observations.",
    )
    if live.sources:  # a capture peeks at its source: the sensor needs the source resource
        @sensor
        def _with_source(
            context: dg.SensorEvaluationContext, lake: LakeResource, source: SourceResource
        ) -> dg.SensorResult:
            return evaluate(context, lake, source)

        return _with_source

    @sensor
    def _pipeline(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
        return evaluate(context, lake, None)

    return _pipeline
