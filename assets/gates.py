"""The cross-run gate: a consumer does not read a table whose latest blocking check failed.

Dagster stops the assets downstream of a failed blocking check only inside the run that
evaluated it. A later run — the next sensor tick, a manual microbatch — would consume what the
check rejected. So before consuming, a consumer looks up the latest execution of every blocking
check on the tables it reads (`DagsterInstance.get_latest_asset_check_evaluation_record`), in
whichever run it happened. Like Dagster's in-run blocking, an execution without a verdict
blocks too: one still running elsewhere, or one whose run ended before the check ran (the
pipeline sensor then requests that table again, so its check runs). An execution planned by a
run that has not started — queued behind the run under way — is passed over: it has judged
nothing yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import dagster as dg

from lakelog.assets.naming import output_key
from lakelog.consumers import Consumer


@dataclass(frozen=True)
class Verdict:
    """The latest execution of one blocking check, as the gate reads it."""

    check: dg.AssetCheckKey
    #: The execution's record id (None: never executed); a new one means a new verdict.
    record: int | None
    blocks: bool
    #: The execution has no verdict and never will: its run ended before the check ran.
    unfinished: bool = False
    reason: str = ""

    @property
    def name(self) -> str:
        return f"{self.check.asset_key.to_user_string()}:{self.check.name}"


#: Statuses of a run that has not started: the check executions it planned say nothing yet,
#: and it takes whatever input arrives until it starts (the pipeline sensor holds meanwhile).
NOT_STARTED = (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
               dg.DagsterRunStatus.STARTING)
#: How many of a check's latest executions the gate looks through for one of a run under way
#: or ended (the pipeline sensor queues one run at most).
LOOK_BACK = 5


def _latest(instance: dg.DagsterInstance, check: dg.AssetCheckKey) -> Any:
    """The latest execution of `check` but those planned by runs that have not started: a run
    waiting in the queue behind the one under way has planned its checks already. When the
    `LOOK_BACK` latest were all planned so, the latest (it blocks: no verdict yet)."""
    history = instance.event_log_storage.get_asset_check_execution_history(check, limit=LOOK_BACK)
    for record in history:  # newest first
        if record.event is not None and record.event.asset_check_evaluation is not None:
            return record
        run = instance.get_run_by_id(record.run_id)
        if run is None or run.status not in NOT_STARTED:
            return record
    return history[0] if history else None


def verdict(instance: dg.DagsterInstance, check: dg.AssetCheckKey) -> Verdict:
    """How the latest execution of `check` stands, in whichever run it was (a run that has not
    started yet does not count)."""
    record = _latest(instance, check)
    if record is None:
        return Verdict(check, None, False)
    evaluation = record.event.asset_check_evaluation if record.event else None
    if evaluation is not None:
        if evaluation.passed or evaluation.severity != dg.AssetCheckSeverity.ERROR:
            return Verdict(check, record.id, False)
        first = (evaluation.description or "").splitlines()[:1]
        return Verdict(check, record.id, True,
                       reason=f"failed in run {record.run_id}{''.join(f' ({d})' for d in first)}")
    run = instance.get_run_by_id(record.run_id)
    if run is None or run.is_finished:
        return Verdict(check, record.id, True, unfinished=True,
                       reason=f"not evaluated: run {record.run_id} ended before it ran")
    return Verdict(check, record.id, True, reason=f"being evaluated in run {record.run_id}")


def verdicts(instance: dg.DagsterInstance, checks: Iterable[dg.AssetCheckKey]) -> list[Verdict]:
    return [verdict(instance, c) for c in checks]


def blocking(verdicts: Iterable[Verdict]) -> list[Verdict]:
    return [v for v in verdicts if v.blocks]


def describe(blocked: Iterable[Verdict]) -> str:
    return "; ".join(f"check {v.name} {v.reason}" for v in blocked)


def blocked_consumer(
    context: dg.OpExecutionContext, consumer: Consumer, gates: Iterable[dg.AssetCheckKey]
) -> bool:
    """Whether a blocking check of what `consumer` reads has not passed: if so, says why in the
    log and on each of its outputs (an observation), and the step consumes nothing."""
    blocked = blocking(verdicts(context.instance, gates))
    if not blocked:
        return False
    why = describe(blocked)
    context.log.warning(f"consumer {consumer.name} consumes nothing: {why}")
    for output in consumer.outputs:
        context.log_event(dg.AssetObservation(
            asset_key=output_key(output),
            metadata={"blocked_by": [v.name for v in blocked], "blocked_because": why},
        ))
    return True
