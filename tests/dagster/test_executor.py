"""The threaded executor: ready steps overlap on threads of the run's process, a step starts
only after its upstream steps, a failure skips what depends on it, and `execute_here` runs a
job on it in this process (as `lakelog run` and `lakelog demo` do)."""

from __future__ import annotations

import threading

import dagster as dg
import pytest

from lakelog.assets.executor import (
    STEPS_VARIABLE,
    VALIDATION_TAG,
    execute_here,
    threaded_executor,
)
from lakelog.errors import ConfigError

#: How long a step waits for its sibling to arrive before the test fails (not a timing
#: assertion: two steps that overlap meet at once, steps run one by one never do).
MEET_TIMEOUT = 30


def _graph(record: list[str], *, meet: threading.Barrier | None = None,
           failing: str | None = None) -> list[dg.AssetsDefinition]:
    """a → (b, c) → d; b and c meet at `meet` if given; `failing` raises."""
    lock = threading.Lock()

    def body(name: str) -> None:
        with lock:
            record.append(f"start {name} on {threading.current_thread().name}")
        if meet is not None and name in ("b", "c"):
            meet.wait()
        if name == failing:
            raise RuntimeError(f"{name} fails")
        with lock:
            record.append(f"end {name}")

    @dg.asset
    def a() -> None:
        body("a")

    @dg.asset(deps=[a])
    def b() -> None:
        body("b")

    @dg.asset(deps=[a])
    def c() -> None:
        body("c")

    @dg.asset(deps=[b, c])
    def d() -> None:
        body("d")

    return [a, b, c, d]


def _run(assets: list[dg.AssetsDefinition], max_concurrent: int | None = None
         ) -> dg.ExecuteInProcessResult:
    job = dg.define_asset_job("j", executor_def=threaded_executor)
    defs = dg.Definitions(assets=assets, jobs=[job])
    config = {} if max_concurrent is None else {
        "execution": {"config": {"max_concurrent": max_concurrent}}}
    with dg.DagsterInstance.ephemeral() as instance:
        return execute_here(defs.resolve_job_def("j"), instance=instance, run_config=config,
                            tags={}, raise_on_error=False)


def test_ready_steps_overlap_and_wait_for_their_upstream_steps():
    record: list[str] = []
    result = _run(_graph(record, meet=threading.Barrier(2, timeout=MEET_TIMEOUT)))
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    # b and c met at the barrier, so both ran at once, each on a thread of its own.
    threads = {line.split(" on ")[1] for line in record if line.startswith(("start b", "start c"))}
    assert len(threads) == 2 and threading.current_thread().name not in threads
    order = [line.split(" on ")[0] for line in record]
    assert order[:2] == ["start a", "end a"]
    assert order.index("start d") > max(order.index("end b"), order.index("end c"))
    assert {e.asset_key for e in result.get_asset_materialization_events()} == {
        dg.AssetKey(n) for n in "abcd"}
    # Each step's events reach the run in the step's order.
    for step in "abcd":
        kinds = [e.event_type_value for e in result.all_events if e.step_key == step]
        assert kinds[0] == "STEP_START" and kinds[-1] == "STEP_SUCCESS", kinds


def test_one_at_a_time_when_configured():
    record: list[str] = []
    active, most = [0], [0]
    lock = threading.Lock()

    @dg.asset
    def a() -> None:
        record.append("a")

    def sibling(name: str):
        @dg.asset(name=name, deps=[a])
        def step() -> None:
            with lock:
                active[0] += 1
                most[0] = max(most[0], active[0])
            record.append(name)
            with lock:
                active[0] -= 1
        return step

    result = _run([a, sibling("b"), sibling("c"), sibling("e")], max_concurrent=1)
    assert result.success
    assert most[0] == 1 and sorted(record) == ["a", "b", "c", "e"]


def test_validation_steps_take_turns_while_other_steps_run_beside_them():
    """Two validation steps never overlap; a step of another kind runs beside one (it meets
    it at a barrier)."""
    meet = threading.Barrier(2, timeout=MEET_TIMEOUT)
    lock = threading.Lock()
    validating, most, record = [0], [0], []

    @dg.asset
    def a() -> None:
        record.append("a")

    def validation(name: str):
        @dg.asset(name=name, deps=[a], op_tags={VALIDATION_TAG: "gx", "dagster/priority": "1"})
        def step() -> None:
            with lock:
                validating[0] += 1
                most[0] = max(most[0], validating[0])
                record.append("check")
                first = record.count("check") == 1
            if first:
                meet.wait()  # the consumer runs beside it, not the other check
            with lock:
                validating[0] -= 1
        return step

    @dg.asset(deps=[a])
    def consumer() -> None:
        record.append("consumer")
        meet.wait()

    result = _run([a, validation("check_1"), validation("check_2"), consumer])
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert most[0] == 1
    # The consumer met the first check, so the second waited for both, though it was ready.
    assert record[0] == "a" and sorted(record[1:3]) == ["check", "consumer"]
    assert record[3] == "check"


@pytest.mark.parametrize("priority", [None, "1"])
def test_ready_steps_with_priority_go_first(priority):
    """One step at a time: of the steps ready together, the ones with a higher
    `dagster/priority` run first; without it, in the plan's order (here: `aaa` first)."""
    record: list[str] = []
    tags = {} if priority is None else {"dagster/priority": priority}

    @dg.asset
    def a() -> None:
        record.append("a")

    @dg.asset(deps=[a])
    def aaa() -> None:
        record.append("aaa")

    @dg.asset(deps=[a], op_tags=tags)
    def check() -> None:
        record.append("check")

    assert _run([a, aaa, check], max_concurrent=1).success
    assert record == (["a", "aaa", "check"] if priority is None else ["a", "check", "aaa"])


def test_a_failed_step_skips_its_downstream_steps_and_fails_the_run():
    record: list[str] = []
    result = _run(_graph(record, failing="b"))
    assert not result.success
    failed = [e.step_key for e in result.all_events if e.is_step_failure]
    assert failed == ["b"]
    assert "end c" in record and not any(line.startswith("start d") for line in record)
    assert {e.asset_key for e in result.get_asset_materialization_events()} == {
        dg.AssetKey("a"), dg.AssetKey("c")}


def test_execute_here_records_the_run_on_the_instance_with_its_tags():
    record: list[str] = []
    job = dg.define_asset_job("j", executor_def=threaded_executor)
    defs = dg.Definitions(assets=_graph(record), jobs=[job])
    with dg.DagsterInstance.ephemeral() as instance:
        result = execute_here(defs.resolve_job_def("j"), instance=instance, run_config={},
                              tags={"who": "test"})
        run = instance.get_run_by_id(result.run_id)
        assert run.status == dg.DagsterRunStatus.SUCCESS and run.tags["who"] == "test"
        engine = [e.message for e in result.all_events if e.event_type_value == "ENGINE_EVENT"]
        assert any("up to 2 threads" in m for m in engine), engine


def test_the_environment_sets_the_steps_of_runs_whose_config_does_not(monkeypatch):
    monkeypatch.setenv(STEPS_VARIABLE, "1")
    alone = _run(_graph([], meet=threading.Barrier(2, timeout=1)))
    assert not alone.success  # b waited for c in vain: one step at a time
    assert [e.step_key for e in alone.all_events if e.is_step_failure] == ["b", "c"]
    monkeypatch.setenv(STEPS_VARIABLE, "2")
    assert _run(_graph([], meet=threading.Barrier(2, timeout=MEET_TIMEOUT))).success


@pytest.mark.parametrize("config, environ, message", [
    ({"max_concurrent": 0}, {}, "at least 1, not 0"),
    ({}, {STEPS_VARIABLE: "0"}, "at least 1, not 0"),
    ({}, {STEPS_VARIABLE: "two"}, "LAKELOG_STEPS_AT_ONCE must be a whole number, not 'two'"),
])
def test_a_bad_number_of_steps_is_a_clear_error(monkeypatch, config, environ, message):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    job = dg.define_asset_job("j", executor_def=threaded_executor)
    defs = dg.Definitions(assets=_graph([]), jobs=[job])
    with dg.DagsterInstance.ephemeral() as instance, pytest.raises(ConfigError, match=message):
        execute_here(defs.resolve_job_def("j"), instance=instance,
                     run_config={"execution": {"config": config}}, tags={})


def test_a_step_retried_at_once_runs_again_after_its_first_attempt_ended():
    attempts: list[int] = []

    @dg.asset(retry_policy=dg.RetryPolicy(max_retries=1))  # no delay: up for retry at once
    def flaky() -> None:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails")

    @dg.asset(deps=[flaky])
    def after() -> None:
        attempts.append(0)

    result = _run([flaky, after])
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert attempts == [1, 2, 0]
    kinds = [e.event_type_value for e in result.all_events if e.step_key == "flaky"]
    assert kinds.count("STEP_UP_FOR_RETRY") == 1 and kinds[-1] == "STEP_SUCCESS"


def test_a_raised_failure_lets_the_steps_under_way_end_first():
    """With raise_on_error the run raises the failed step's error, once its sibling has ended
    and its events have reached the run."""
    record: list[str] = []
    both, failed = threading.Barrier(2, timeout=MEET_TIMEOUT), threading.Event()

    @dg.asset
    def a() -> None:
        pass

    @dg.asset(deps=[a])
    def b() -> None:
        both.wait()
        failed.set()
        raise RuntimeError("b fails")

    @dg.asset(deps=[a])
    def c() -> None:
        both.wait()
        failed.wait(MEET_TIMEOUT)
        threading.Event().wait(2)  # still at work while the run's thread learns of b's failure
        record.append("end c")

    job = dg.define_asset_job("j", executor_def=threaded_executor)
    defs = dg.Definitions(assets=[a, b, c], jobs=[job])
    with dg.DagsterInstance.ephemeral() as instance:
        with pytest.raises(Exception, match="b fails"):
            execute_here(defs.resolve_job_def("j"), instance=instance, run_config={}, tags={})
        [run] = instance.get_runs()
        done = [r.dagster_event.step_key for r in instance.all_logs(run.run_id)
                if r.dagster_event and r.dagster_event.event_type_value == "STEP_SUCCESS"]
    assert record == ["end c"] and sorted(done) == ["a", "c"]
