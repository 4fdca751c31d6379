"""The threaded executor: a run's steps in one process and one Spark session, two at a time.

A pipeline run is a chain of small steps (an ingest, then ~25 consumers, relays and models),
and each spends much of its time waiting: for the Spark server to analyse and plan a query, for
a Delta commit, for Dagster's storage. Dagster's in-process executor runs them one after the
other, so the server idles while the client works and the client while the server does. This
executor runs the steps that are ready — their upstream steps done — on worker threads of the
run's own process: they share its resources (one Spark session, one lake) like the in-process
executor's steps, and at most `max_concurrent` run at once. Measured on 2 cores
(benchmarks/README.md): the runs of `lakelog demo --events 20000 --batches 2` on a warm server
took 29.0 s against 31.9 s one step at a time (medians of three, `bench_executor.py`), and under
the daemon the worst table's p99 freshness fell from 96.9 to 86.8 s (`bench_freshness.py`); on
a server just started, whose JIT compilers hold the cores, the 100k demo gained little.

It is Dagster's in-process plan loop (`dagster._core.execution.plan.execute_plan`) with the
step bodies on threads: on the run's thread, a step's events are yielded as the step makes them
and handed to the plan's bookkeeping, in that order, once it has ended (so a retry is taken up
only after its first attempt); a step's upstream steps end before it starts
(every dependency of the graph is a Dagster dependency). Steps that must not overlap one
another can be tagged and limited with `tag_concurrency_limits`, as with the multiprocess
executor. Steps tagged `VALIDATION_TAG` (the Great Expectations checks) run one at a time
whatever the config says: validations take turns in the process anyway (one GX context at a
time, `lakelog.quality.validate`), so a second one would hold a thread only to wait, while a
consumer could use it.

A run that is interrupted (terminated from the UI) stops taking steps, lets the steps under way
end (a thread cannot be interrupted; a microbatch is short) and then raises, as it does when a
step's thread raises; the run's events are complete either way.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from typing import Any

import dagster as dg
import dagster._check as check
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.api import ExecuteRunWithPlanIterable
from dagster._core.execution.compute_logs import create_compute_log_file_key
from dagster._core.execution.context.system import PlanExecutionContext, PlanOrchestrationContext
from dagster._core.execution.context_creation_job import PlanExecutionContextManager
from dagster._core.execution.execute_in_process import core_execute_in_process, merge_run_tags
from dagster._core.execution.plan.execute_plan import (
    _trigger_hook,
    dagster_event_sequence_for_step,
)
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.retries import RetryMode, get_retries_config
from dagster._core.execution.step_dependency_config import (
    StepDependencyConfig,
    get_step_dependency_config_field,
)
from dagster._core.execution.tags import get_tag_concurrency_limits_config
from dagster._core.executor.base import Executor
from dagster._utils.error import serializable_error_info_from_exc_info

from lakelog.errors import ConfigError

#: Steps at once by default: a step waits on the server about as long as it works itself.
MAX_CONCURRENT = 2
#: Steps at once for runs whose config does not say (``execution: config: max_concurrent``):
#: the sensor's runs, `lakelog run` and `lakelog demo`. 1 runs the steps one by one.
STEPS_VARIABLE = "LAKELOG_STEPS_AT_ONCE"
#: How often the run's thread looks for a termination while steps are under way.
POLL_SECONDS = 0.5
#: Steps that validate with Great Expectations: one at a time in a run.
VALIDATION_TAG = "lakelog/validation"
_DONE = object()


class ThreadedExecutor(Executor):
    def __init__(
        self,
        retries: RetryMode,
        max_concurrent: int,
        tag_concurrency_limits: list[dict[str, Any]] | None = None,
        step_dependency_config: StepDependencyConfig = StepDependencyConfig.default(),
    ) -> None:
        self._retries = retries
        if max_concurrent < 1:
            raise ConfigError(
                f"the threaded executor's max_concurrent must be at least 1, not {max_concurrent}")
        self.max_concurrent = max_concurrent
        limits = list(tag_concurrency_limits or [])
        if not any(limit.get("key") == VALIDATION_TAG for limit in limits):
            limits.append({"key": VALIDATION_TAG, "limit": 1})
        self.tag_concurrency_limits = limits
        self._step_dependency_config = step_dependency_config

    @property
    def retries(self) -> RetryMode:
        return self._retries

    @property
    def step_dependency_config(self) -> StepDependencyConfig:
        return self._step_dependency_config

    def execute(
        self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan
    ) -> Iterator[DagsterEvent]:
        check.inst_param(plan_context, "plan_context", PlanOrchestrationContext)
        yield DagsterEvent.engine_event(
            plan_context,
            f"Executing steps in process on up to {self.max_concurrent} threads",
            event_specific_data=EngineEventData.in_process(
                os.getpid(), execution_plan.step_keys_to_execute),
        )

        def iterator(job_context: PlanExecutionContext, execution_plan: ExecutionPlan
                     ) -> Iterator[DagsterEvent]:
            with InstanceConcurrencyContext(job_context.instance, job_context.dagster_run) as icc:
                yield from self._plan_iterator(job_context, execution_plan, icc)

        yield from iter(
            ExecuteRunWithPlanIterable(
                execution_plan=plan_context.execution_plan,
                iterator=iterator,
                execution_context_manager=PlanExecutionContextManager(
                    job=plan_context.job,
                    retry_mode=plan_context.retry_mode,
                    execution_plan=plan_context.execution_plan,
                    run_config=plan_context.run_config,
                    dagster_run=plan_context.dagster_run,
                    instance=plan_context.instance,
                    raise_on_error=plan_context.raise_on_error,
                    output_capture=plan_context.output_capture,
                    step_dependency_config=self.step_dependency_config,
                ),
            )
        )

    def _plan_iterator(
        self,
        job_context: PlanExecutionContext,
        execution_plan: ExecutionPlan,
        concurrency: InstanceConcurrencyContext,
    ) -> Iterator[DagsterEvent]:
        logs = job_context.instance.compute_log_manager
        step_keys = [step.key for step in execution_plan.get_steps_to_execute_in_topo_order()]
        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        running: dict[str, tuple[Any, list[DagsterEvent]]] = {}
        with ExitStack() as stack:
            active = stack.enter_context(execution_plan.start(
                retry_mode=job_context.retry_mode,
                max_concurrent=self.max_concurrent,
                tag_concurrency_limits=self.tag_concurrency_limits,
                instance_concurrency_context=concurrency,
                step_dependency_config=job_context.step_dependency_config,
            ))
            log_key = logs.build_log_key_for_run(job_context.run_id, create_compute_log_file_key())
            try:
                log_context = stack.enter_context(logs.capture_logs(log_key))
                yield DagsterEvent.capture_logs(job_context, step_keys, log_key, log_context)
            except Exception:
                yield DagsterEvent.engine_event(
                    plan_context=job_context,
                    message="Exception while setting up compute log capture",
                    event_specific_data=EngineEventData(
                        error=serializable_error_info_from_exc_info(sys.exc_info())),
                )
            failure: BaseException | None = None
            while (failure is None and not active.is_complete) or running:
                if failure is None and active.check_for_interrupts():  # the run was terminated
                    active.mark_interrupted()
                    failure = DagsterExecutionInterruptedError()
                if failure is None:
                    for step in active.get_steps_to_execute():
                        step_context = job_context.for_step(step, active.get_known_state())
                        running[step.key] = (step_context, [])
                        threading.Thread(target=_run_step, args=(step.key, step_context, events),
                                         name=f"step:{step.key}", daemon=True).start()
                    yield from active.concurrency_event_iterator(job_context)
                if not running:
                    active.sleep_til_ready()
                    continue
                try:
                    key, item = events.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    continue
                step_context, step_events = running[key]
                if isinstance(item, BaseException):  # what the step's thread raised: its end
                    failure = failure or item
                    item = _DONE
                if item is not _DONE:
                    step_events.append(item)
                    yield item
                    continue
                # The step has ended: its events reach the plan's bookkeeping now, as in the
                # in-process loop (a retry is not taken up before its first attempt has ended).
                del running[key]
                for event in step_events:
                    active.handle_event(event)
                active.verify_complete(job_context, key)
                for event in active.plan_events_iterator(job_context):
                    step_events.append(event)
                    yield event
                yield from _trigger_hook(step_context, step_events)
            if failure is not None:  # raised once the steps under way have ended
                raise failure


def steps_at_once(environ: Mapping[str, str]) -> int:
    """`STEPS_VARIABLE`'s number of steps at once, or `MAX_CONCURRENT`."""
    value = environ.get(STEPS_VARIABLE, "").strip()
    if not value:
        return MAX_CONCURRENT
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{STEPS_VARIABLE} must be a whole number, not {value!r}") from None


def execute_here(
    job: dg.JobDefinition,
    *,
    instance: dg.DagsterInstance,
    run_config: Mapping[str, Any],
    tags: Mapping[str, str],
    partition_key: str | None = None,
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    """`job.execute_in_process(...)` on the job's own executor: Dagster's always runs a job on
    its in-process executor, one step at a time.

    The same steps as Dagster's (`JobDefinition.execute_in_process`, 1.13): the job as an
    ephemeral one (outputs kept in memory), the run's tags with its partition's, then the run.
    """
    ephemeral = job.as_ephemeral_job(resource_defs={}, input_values={}).with_executor_def(
        job.executor_def)
    return core_execute_in_process(
        run_config=run_config,
        job=InMemoryJob(job_def=ephemeral),
        instance=instance,
        output_capturing_enabled=True,
        raise_on_error=raise_on_error,
        run_tags=merge_run_tags(job_def=job, partition_key=partition_key, tags=tags,
                                asset_selection=[], instance=instance, run_config=run_config),
        asset_selection=frozenset(),
    )


def _run_step(key: str, step_context: Any, events: queue.Queue) -> None:
    """One step's events onto `events`, then `_DONE` (or what it raised)."""
    try:
        for event in dagster_event_sequence_for_step(step_context):
            events.put((key, event))
        events.put((key, _DONE))
    except BaseException as exc:  # noqa: BLE001 - handed to the run's thread, which raises it
        events.put((key, exc))


@dg.executor(
    name="threaded",
    config_schema={
        "retries": get_retries_config(),
        "max_concurrent": dg.Field(
            int, is_required=False,
            description=f"Steps run at once, on threads of the run's process (default: "
                        f"${STEPS_VARIABLE}, else {MAX_CONCURRENT})."),
        "tag_concurrency_limits": get_tag_concurrency_limits_config(),
        "step_dependency_config": get_step_dependency_config_field(),
    },
)
def threaded_executor(init_context: dg.InitExecutorContext) -> ThreadedExecutor:
    """The run's steps in its own process, the ready ones on up to `max_concurrent` threads."""
    config = init_context.executor_config
    return ThreadedExecutor(
        retries=RetryMode.from_config(config["retries"]),
        max_concurrent=(config["max_concurrent"] if "max_concurrent" in config
                        else steps_at_once(os.environ)),
        tag_concurrency_limits=config.get("tag_concurrency_limits"),
        step_dependency_config=StepDependencyConfig.from_config(
            config.get("step_dependency_config")),
    )
