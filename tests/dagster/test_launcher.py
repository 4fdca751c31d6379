"""The prefork run launcher (`lakelog.assets.launcher`) with the real `dagster job launch` CLI:
runs are forks of a server that preloaded the configured modules, pick up a changed code
location, outlive the launching process, can be terminated, and a worker killed with SIGKILL
has its run reported failed. No Spark: the job only records what its worker is."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import yaml
from processes import stop_group, subprocess_env

from dagster._core.launcher.base import WorkerStatus

from lakelog.assets.launcher import WORKER_TAG, PreforkRunLauncher
from lakelog.assets.prefork import WORKER_NAME
from lakelog.assets.runner_tags import RUNNER_HOST, RUNNER_PID
from lakelog.procfs import stat_fields

DAGSTER = Path(sys.executable).with_name("dagster")
JOBS = Path(__file__).with_name("prefork_jobs.py")
#: `wave`: a standard module nothing else here imports, so a worker that has it was preloaded.
PRELOAD = ["dagster", "dagster._cli.api", "wave"]


#: Runs launched by the launching command itself (Dagster's default queues runs for a daemon).
LAUNCHED_HERE = {"module": "dagster._core.run_coordinator", "class": "DefaultRunCoordinator"}
#: lakelog's run queue (deploy/dagster.yaml): queued, launched by the daemon.
QUEUED = {"module": "lakelog.assets.run_queue", "class": "PreforkQueuedRunCoordinator",
          "config": {"dequeue_interval_seconds": 1}}


def instance_home(tmp_path: Path, preload: list[str] = PRELOAD,
                  coordinator: dict = LAUNCHED_HERE) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump({
        "run_launcher": {"module": "lakelog.assets.launcher", "class": "PreforkRunLauncher",
                         "config": {"preload_modules": preload}},
        "run_coordinator": coordinator,
        "telemetry": {"enabled": False},
    }))
    return home


def launch(home: Path, jobs: Path, out: Path, sleep: float = 0.0, leave: bool = False
           ) -> tuple[int, str]:
    """`dagster job launch` of prefork_job; its exit code and output. The output goes to a
    file, not a pipe: the run's worker inherits it and may outlive the command."""
    config = {"ops": {"report": {"config": {"out": str(out), "sleep": sleep, "exit": leave}}}}
    log = out.with_suffix(".log")
    with log.open("w") as sink:
        code = subprocess.run(
            [str(DAGSTER), "job", "launch", "-f", str(jobs), "-j", "prefork_job",
             "--config-json", json.dumps(config)],
            env=subprocess_env(DAGSTER_HOME=str(home),
                               PREFORK_TEST_IMPORTS=str(home.parent / "imports")),
            stdout=sink, stderr=subprocess.STDOUT,
            timeout=180).returncode
    return code, log.read_text()


def last_run(instance: dg.DagsterInstance) -> dg.DagsterRun:
    [record] = instance.get_run_records(limit=1)
    return record.dagster_run


def wait_finished(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun:
    deadline = time.monotonic() + 120  # a liveness bound, not a speed check
    while time.monotonic() < deadline:
        run = instance.get_run_by_id(run_id)
        if run.is_finished:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish: {run.status}")


def wait_for(path: Path) -> dict:
    deadline = time.monotonic() + 120
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.1)
    return json.loads(path.read_text())


def test_runs_are_forks_of_the_preloaded_server_and_see_a_changed_code_location(tmp_path):
    home, jobs = instance_home(tmp_path), tmp_path / "jobs.py"
    jobs.write_text(JOBS.read_text())
    code, output = launch(home, jobs, tmp_path / "first.json")
    assert code == 0, output
    instance = dg.DagsterInstance.from_config(str(home))
    run = wait_finished(instance, last_run(instance).run_id)
    seen = json.loads((tmp_path / "first.json").read_text())

    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert PreforkRunLauncher.worker_of(run)["pid"] == seen["pid"]
    assert json.loads(seen["worker_tag"])["pid"] == seen["pid"]  # tagged before it ran
    assert seen["name"] == WORKER_NAME and seen["preloaded_wave"] and seen["version"] == 1
    importers = (tmp_path / "imports").read_text().split()
    assert str(seen["pid"]) in importers  # the worker imported the code location itself

    jobs.write_text(JOBS.read_text().replace("VERSION = 1", "VERSION = 2"))
    code, output = launch(home, jobs, tmp_path / "second.json")
    assert code == 0, output
    run = wait_finished(instance, last_run(instance).run_id)
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert json.loads((tmp_path / "second.json").read_text())["version"] == 2


def gone(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie not yet reaped counts as ended)."""
    fields = stat_fields(pid)
    return fields is None or fields[0] == "Z"


def test_a_worker_outlives_its_launcher_and_a_terminated_run_is_canceled(tmp_path):
    home, out = instance_home(tmp_path), tmp_path / "seen.json"
    code, output = launch(home, JOBS, out, sleep=600)
    assert code == 0, output  # the launching process has ended ...
    seen = wait_for(out)  # ... and its worker runs the op
    instance = dg.DagsterInstance.from_config(str(home))
    run = last_run(instance)
    health = instance.run_launcher.check_run_worker_health(run)
    assert health.status == WorkerStatus.RUNNING and health.run_worker_id == str(seen["pid"])

    assert instance.run_launcher.terminate(run.run_id)
    run = wait_finished(instance, run.run_id)
    assert run.status == dg.DagsterRunStatus.CANCELED
    deadline = time.monotonic() + 30
    while not gone(seen["pid"]):
        assert time.monotonic() < deadline, "the terminated worker did not exit"
        time.sleep(0.1)
    assert instance.run_launcher.check_run_worker_health(run).status == WorkerStatus.FAILED


def test_a_worker_killed_has_its_run_failed_by_its_supervisor(tmp_path):
    home, out = instance_home(tmp_path), tmp_path / "seen.json"
    code, output = launch(home, JOBS, out, sleep=600)
    assert code == 0, output
    seen = wait_for(out)
    os.kill(seen["pid"], signal.SIGKILL)
    instance = dg.DagsterInstance.from_config(str(home))
    run = wait_finished(instance, last_run(instance).run_id)

    assert run.status == dg.DagsterRunStatus.FAILURE
    messages = [e.message or "" for e in
                instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
    assert any(f"Run worker process {seen['pid']}" in m and "SIGKILL" in m for m in messages)


def test_a_worker_that_ends_without_ending_its_run_has_it_failed(tmp_path):
    home, out = instance_home(tmp_path), tmp_path / "seen.json"
    code, output = launch(home, JOBS, out, leave=True)
    assert code == 0, output
    seen = wait_for(out)
    instance = dg.DagsterInstance.from_config(str(home))
    run = wait_finished(instance, last_run(instance).run_id)

    assert run.status == dg.DagsterRunStatus.FAILURE
    messages = [e.message or "" for e in
                instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
    assert f"Run worker process {seen['pid']} for {run.run_id} exited without ending the run." \
        in messages


def test_a_module_that_cannot_be_preloaded_fails_the_launch_with_its_error(tmp_path):
    home = instance_home(tmp_path, preload=["dagster", "no_such_module_for_lakelog"])
    _, output = launch(home, JOBS, tmp_path / "never.json")
    instance = dg.DagsterInstance.from_config(str(home))
    run = last_run(instance)

    assert run.status == dg.DagsterRunStatus.FAILURE
    assert WORKER_TAG not in run.tags and not (tmp_path / "never.json").exists()
    said = output + "".join(e.message or "" for e in instance.all_logs(run.run_id))
    assert "No module named 'no_such_module_for_lakelog'" in said


def test_a_run_whose_lakelog_process_died_is_failed_by_run_monitoring(tmp_path):
    """A run `lakelog run` executes in its own process has no worker of this launcher; once
    that process is gone (killed) the run can never end by itself, and it holds its pools and
    the pipeline's run limit: run monitoring's health check reports it failed."""
    instance = dg.DagsterInstance.from_config(str(instance_home(tmp_path)))
    gone_process = subprocess.Popen(["true"])
    gone_process.wait()  # a pid no process has any more

    @dg.op
    def noop() -> None:
        pass

    @dg.job
    def pipeline() -> None:
        noop()

    def health(**tags: str) -> WorkerStatus:
        run = instance.create_run_for_job(pipeline, status=dg.DagsterRunStatus.STARTED,
                                          tags=tags)
        return instance.run_launcher.check_run_worker_health(run).status

    here = socket.gethostname()
    assert health(**{RUNNER_HOST: here, RUNNER_PID: str(gone_process.pid)}) == WorkerStatus.FAILED
    assert health(**{RUNNER_HOST: here, RUNNER_PID: "1"}) == WorkerStatus.RUNNING  # alive
    assert health(**{RUNNER_HOST: "elsewhere", RUNNER_PID: str(gone_process.pid)}) == (
        WorkerStatus.RUNNING)  # another host's process: not ours to judge
    assert health() == WorkerStatus.RUNNING  # launched by a code server


def prefork_servers(parent: int) -> list[int]:
    """The pids of the prefork servers that process `parent` started."""
    found = []
    for proc in Path("/proc").iterdir():
        fields = stat_fields(proc.name) if proc.name.isdigit() else None
        if fields is None or fields[0] == "Z" or int(fields[1]) != parent:
            continue
        try:
            cmdline = proc.joinpath("cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"lakelog.assets.prefork" in cmdline:
            found.append(int(proc.name))
    return found


def ancestors(pid: int) -> list[int]:
    chain = []
    while (fields := stat_fields(pid)) is not None and pid > 1:
        pid = int(fields[1])
        chain.append(pid)
    return chain


def test_the_run_queue_daemon_starts_the_prefork_server_before_the_first_run(tmp_path):
    """Under lakelog's run queue the daemon that launches queued runs starts the prefork server
    as it starts, with no run queued; the first run is then forked from that server."""
    home, out = instance_home(tmp_path, coordinator=QUEUED), tmp_path / "seen.json"
    env = subprocess_env(DAGSTER_HOME=str(home))
    with (tmp_path / "daemon.log").open("w") as sink:
        daemon = subprocess.Popen(
            [str(DAGSTER.with_name("dagster-daemon")), "run", "-f", str(JOBS)], env=env,
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # a liveness bound, not a speed check
        while not (servers := prefork_servers(daemon.pid)):
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the daemon started no prefork server"
            time.sleep(0.2)
        instance = dg.DagsterInstance.from_config(str(home))
        assert instance.get_run_records(limit=1) == []  # before any run

        code, output = launch(home, JOBS, out, sleep=30)
        assert code == 0, output  # queued: the daemon launches it
        seen = wait_for(out)
        assert servers[0] in ancestors(seen["pid"])  # forked from the server started ahead
        assert prefork_servers(daemon.pid) == servers  # and no second one
        assert seen["preloaded_wave"]
        run = last_run(instance)
        assert instance.run_launcher.terminate(run.run_id)
        assert wait_finished(instance, run.run_id).status == dg.DagsterRunStatus.CANCELED
    finally:
        stop_group(daemon, timeout=60)
