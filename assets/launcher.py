"""The prefork run launcher: Dagster runs started as forks of a process with their imports done.

Configured in the instance's ``dagster.yaml`` (deploy/dagster.yaml does)::

    run_launcher:
      module: lakelog.assets.launcher
      class: PreforkRunLauncher

`launch_run` hands the run to the prefork server (`lakelog.assets.prefork`) of the code
location's Python, which the launcher starts on its first launch (in the daemon, which launches
queued runs), or before it when the daemon starts (`prepare`, `lakelog.assets.run_queue`), and
which ends with it. The worker runs the run exactly as `dagster api
execute_run` would, the command Dagster's container launchers run. Only code locations that
run from a Python environment here (`dagster dev`, a workspace's ``python_module`` or
``python_file``) are forked (`PreforkRunLauncher.forks`); a ``grpc_server`` location reached
over TCP, perhaps in a container or on another host, launches its runs through its code server,
as with Dagster's default launcher.

The run is tagged with its worker's host, pid and start time before the worker starts it, which
is how `terminate` (an interrupt, as the code server sends) and run monitoring
(`check_run_worker_health`) find it. A worker that ends leaving its run unfinished is reported by
its supervisor at once; monitoring covers the supervisor dying too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterLaunchFailedError
from dagster._core.launcher import DefaultRunLauncher, LaunchRunContext
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus
from dagster._serdes import ConfigurableClassData, serialize_value

from lakelog.assets.prefork import PRELOAD, read_line
from lakelog.assets.runner_tags import runner_gone
from lakelog.procfs import stat_fields

#: The run tag naming the run's worker: ``{"host": ..., "pid": ..., "started": ...}``.
WORKER_TAG = "lakelog/run_worker"


def process_started(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (None: no such process)."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


class PreforkServer:
    """A prefork server for one Python executable, started on first use."""

    def __init__(self, executable: str, modules: Sequence[str], start_timeout_s: float):
        self.executable, self.modules, self.start_timeout_s = executable, list(modules), start_timeout_s
        self._process: subprocess.Popen | None = None
        self._folder: str | None = None
        self._lock = threading.Lock()

    @property
    def socket_path(self) -> str | None:
        return None if self._folder is None else os.path.join(self._folder, "socket")

    def _start(self) -> None:
        self.stop()
        self._folder = tempfile.mkdtemp(prefix="lakelog-prefork-")  # 0700: only its user connects
        self._process = subprocess.Popen(
            [self.executable, "-m", "lakelog.assets.prefork", self.socket_path, *self.modules],
            stdin=subprocess.PIPE,
        )

    def start(self) -> None:
        """Start the server unless it runs: it preloads its modules in the background."""
        with self._lock:
            self._start_unless_running()

    def _start_unless_running(self) -> None:
        if self._process is None or self._process.poll() is not None:
            self._start()

    def launch(self, request: str, record: Callable[[int], None]) -> int:
        """Fork a worker for `request` (serialized `ExecuteRunArgs`) and return its pid. The
        worker starts the run only after `record(pid)` has returned; if it raises, the worker
        ends without touching the run."""
        with self._lock:
            self._start_unless_running()
            conn = self._connect()
        with conn:
            conn.settimeout(self.start_timeout_s)  # the first request waits for the preloading
            try:
                conn.sendall(f"{request}\n".encode())
                kind, _, detail = read_line(conn).partition(" ")
            except OSError as exc:
                raise DagsterLaunchFailedError(
                    f"the prefork server ({self.executable}) did not answer: {exc}") from exc
            if kind == "pid":
                record(int(detail))
                try:
                    conn.sendall(b"go\n")
                except OSError as exc:  # the supervisor is gone: so is its worker
                    raise DagsterLaunchFailedError(
                        f"the run worker {detail} did not wait to start: {exc}") from exc
                return int(detail)
        raise DagsterLaunchFailedError(
            f"the prefork server ({self.executable} -m lakelog.assets.prefork) did not start the "
            f"run: {detail.replace(chr(92) + 'n', chr(10)) if detail else 'it closed the connection'}"
        )

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.socket_path)
                return conn
            except OSError:
                conn.close()
            assert self._process is not None
            if self._process.poll() is not None:
                raise DagsterLaunchFailedError(
                    f"the prefork server ({self.executable} -m lakelog.assets.prefork) exited "
                    f"with code {self._process.returncode} before it listened; its output is in "
                    "the launching process's log")
            if time.monotonic() > deadline:
                raise DagsterLaunchFailedError(
                    f"the prefork server did not listen within {self.start_timeout_s} s")
            time.sleep(0.02)

    def stop(self) -> None:
        """End the server (its workers go on); nothing if it is not running."""
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()  # the server exits when its input closes
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


class PreforkRunLauncher(DefaultRunLauncher):
    """Launches each run as a fork of a prefork server (see the module docstring)."""

    def __init__(self, preload_modules: Sequence[str] = PRELOAD, start_timeout_seconds: int = 120,
                 inst_data: ConfigurableClassData | None = None):
        super().__init__(inst_data=inst_data)
        self.preload_modules = list(preload_modules)
        self.start_timeout_seconds = start_timeout_seconds
        self._servers: dict[str, PreforkServer] = {}
        self._servers_lock = threading.Lock()

    @classmethod
    def config_type(cls) -> dict:
        return {
            "preload_modules": dg.Field(
                [str], is_required=False, default_value=list(PRELOAD),
                description="Modules the prefork server imports before forking run workers: "
                            "third-party packages and lakelog's own (the code location is imported "
                            "by each run)."),
            "start_timeout_seconds": dg.Field(
                int, is_required=False, default_value=120,
                description="How long a launch waits for a new prefork server to preload."),
        }

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData,
                          config_value: Mapping[str, Any]) -> PreforkRunLauncher:
        return cls(inst_data=inst_data, **config_value)

    def _server(self, executable: str) -> PreforkServer:
        with self._servers_lock:
            if executable not in self._servers:
                self._servers[executable] = PreforkServer(
                    executable, self.preload_modules, self.start_timeout_seconds)
            return self._servers[executable]

    def prepare(self, executable: str = sys.executable) -> None:
        """Start the prefork server of `executable` (this process's Python by default) before
        any run needs it, so that the first run launched finds its imports done. The daemon that
        launches queued runs asks for it as it starts (`lakelog.assets.run_queue`)."""
        self._server(executable).start()

    def launch_run(self, context: LaunchRunContext) -> None:
        from dagster._grpc.types import ExecuteRunArgs

        run = context.dagster_run
        if not self.forks(run):
            super().launch_run(context)  # a code location elsewhere: its code server runs it
            return
        origin = run.job_code_origin
        request = serialize_value(ExecuteRunArgs(
            job_origin=origin, run_id=run.run_id, instance_ref=self._instance.get_ref()))

        def record(pid: int) -> None:  # before the worker starts: nothing can overwrite it
            worker = {"host": socket.gethostname(), "pid": pid, "started": process_started(pid)}
            self._instance.add_run_tags(run.run_id, {WORKER_TAG: json.dumps(worker)})

        self._server(origin.executable_path).launch(request, record)
        self._run_ids.add(run.run_id)

    @staticmethod
    def forks(run: dg.DagsterRun) -> bool:
        """Whether the run's code location runs from a Python environment on this machine, so
        its runs are forked here: one Dagster starts itself (a workspace's ``python_module`` or
        ``python_file`` under `dagster-daemon`), or a code server reached over a Unix socket
        (`dagster dev` starts one per location so). A code server reached over TCP — perhaps in
        a container or on another host — or one in a container image launches its own runs."""
        from dagster._core.remote_origin import (
            GrpcServerCodeLocationOrigin,
            ManagedGrpcPythonEnvCodeLocationOrigin,
        )

        origin, remote = run.job_code_origin, run.remote_job_origin
        location = remote.repository_origin.code_location_origin if remote is not None else None
        here = isinstance(location, ManagedGrpcPythonEnvCodeLocationOrigin) or (
            isinstance(location, GrpcServerCodeLocationOrigin) and location.socket is not None)
        return (here and origin is not None and origin.repository_origin.container_image is None
                and bool(origin.executable_path) and os.path.exists(origin.executable_path))

    @staticmethod
    def worker_of(run: dg.DagsterRun) -> dict | None:
        """The run's worker (host, pid, start time), if this launcher launched it."""
        tag = run.tags.get(WORKER_TAG)
        return json.loads(tag) if tag else None

    def _alive(self, worker: Mapping[str, Any]) -> bool:
        started = process_started(worker["pid"])
        return started is not None and started == worker["started"]

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        worker = self.worker_of(run) if run is not None else None
        if worker is None:
            return super().terminate(run_id)
        if run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        if worker["host"] != socket.gethostname() or not self._alive(worker):
            self._instance.report_engine_event(
                f"Run worker {worker['pid']} on {worker['host']} is not running here: nothing "
                "to interrupt.", run, cls=self.__class__)
            return False
        try:
            os.kill(worker["pid"], signal.SIGINT)  # as the code server's termination does
        except OSError as exc:  # it ended meanwhile, or is another user's
            self._instance.report_engine_event(
                f"Could not interrupt run worker {worker['pid']}: {exc}", run, cls=self.__class__)
            return False
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        worker = self.worker_of(run)
        if worker is None and (why := runner_gone(run.tags)):
            # executed in a `lakelog` process that was killed: it holds its pools and the
            # pipeline's run limit until reported failed
            return CheckRunHealthResult(WorkerStatus.FAILED, why)
        if worker is None or worker["host"] != socket.gethostname():
            # launched through a code server, or elsewhere: not ours to judge
            return CheckRunHealthResult(WorkerStatus.RUNNING, "not a worker of this launcher")
        if self._alive(worker):
            return CheckRunHealthResult(WorkerStatus.RUNNING, run_worker_id=str(worker["pid"]))
        return CheckRunHealthResult(
            WorkerStatus.FAILED, f"run worker process {worker['pid']} is no longer running",
            run_worker_id=str(worker["pid"]))

    def dispose(self) -> None:
        for server in self._servers.values():
            server.stop()
        super().dispose()
