"""The prefork server: run workers forked from a process that has imported their libraries once.

Dagster's code server starts each run's process with multiprocessing's spawn: a new Python that
imports Dagster, PySpark, pandas and Great Expectations again before the run's first step, about
7 s of CPU per run on 2 cores (`python -X importtime`), paid on the critical path of a pipeline
that the daemon runs every few seconds. This server imports them once and forks a worker per
run, which starts where the spawned process would have been seconds later.

Only the modules it is told to preload are imported before forking: by default (`PRELOAD`) the
third-party packages and lakelog's own engine and asset factories (`lakelog.assets.location`,
0.4 s a run). The code location — the user's pipeline, its definitions module — is imported by
each worker, so a run launched after a reload of the code location runs the new code. A package
upgraded (or lakelog edited) while the server runs needs a restart of the process that launched
it (the daemon), as with any preloading server: until then runs start from the modules preloaded,
and one that imports a changed module later may mix old code with new.

Protocol, over a Unix socket in a directory only its user can enter: the launcher connects and
sends one line, `dagster api execute_run`'s serialized arguments; the server forks a supervisor,
which forks the worker and answers ``pid <worker pid>`` (or ``error <text>``). The worker waits
until the launcher has recorded that pid on the run and sent ``go``; without it (the launcher
failed or died) the worker ends before touching the run. The supervisor then waits for the
worker: one that ends leaving its run unfinished — killed (kill -9, the kernel's OOM killer) or
not — has its run reported failed with Dagster's own crash explanation, as the code server does
for the processes it spawns (or canceled, if it was being canceled); the daemon's run retries
then launch a failed one again. The server exits when its standard input closes: the process that
started it has ended. Workers and supervisors stay in its process group, so stopping the group
(Ctrl-C on `dagster dev`) stops them too.

    python -m lakelog.assets.prefork SOCKET_PATH MODULE...
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import os
import selectors
import signal
import socket
import sys
import threading
import traceback

from lakelog.spark.doctest_guard import not_a_doctest

#: What a run worker of a lakelog pipeline imports before its first step, heaviest last.
PRELOAD = (
    "dagster",
    "dagster._cli.api",
    "pandas",
    "pyarrow",
    "deltalake",
    "pyspark.sql.connect.session",
    "great_expectations",
    "great_expectations.expectations",
    # lakelog's engine and asset factories, not a pipeline: each run imports its code location.
    "lakelog.assets.location",
)
#: Process names (``ps -o comm``, /proc/<pid>/comm) of the server, a supervisor and a worker.
SERVER_NAME, SUPERVISOR_NAME, WORKER_NAME = "lakelog-prefork", "lakelog-watch", "lakelog-run"
#: The longest request line accepted, and how long a connected launcher may take to send it
#: and, once it has the worker's pid, to say ``go``.
MAX_REQUEST, REQUEST_TIMEOUT_S = 16 << 20, 60.0


def name_process(name: str) -> None:
    """Set this process's name as `ps` shows it (Linux; elsewhere nothing happens)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def read_line(conn: socket.socket) -> str:
    """One newline-terminated line from `conn` (empty if it closed first)."""
    chunks, size = [], 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return ""
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n"):
            return b"".join(chunks).decode()[:-1]
        if size > MAX_REQUEST:
            raise ValueError(f"a request longer than {MAX_REQUEST} bytes")


def preload(modules: list[str]) -> None:
    """Import `modules`; a failure ends the server, and every launch then reports it."""
    with not_a_doctest():
        for module in modules:
            importlib.import_module(module)


def single_threaded() -> None:
    """Refuse to fork with other Python threads alive: a lock one of them holds would stay held
    in every worker. (Native threads of numpy's BLAS and pyarrow's allocator are fork-aware.)"""
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if others:
        raise RuntimeError(f"a preloaded module started threads ({', '.join(others)}): forking "
                           "would copy their locks; leave that module out of preload_modules")


def serve(path: str, modules: list[str]) -> None:
    """Listen at `path`, preload `modules`, then fork a supervised worker per request until
    standard input closes; the socket and its folder are removed on the way out."""
    name_process(SERVER_NAME)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)  # launchers connecting while the modules load wait in the backlog
    try:
        _serve(listener, modules)
    finally:
        listener.close()
        try:
            os.unlink(path)
            os.rmdir(os.path.dirname(path))
        except OSError:
            pass  # the launcher removes them too, when it stops the server


def _serve(listener: socket.socket, modules: list[str]) -> None:
    try:
        preload(modules)
        single_threaded()
    except BaseException:  # noqa: BLE001 - told to every launcher that connects, then exit
        failure = traceback.format_exc().strip().replace("\n", "\\n")
        for _ in range(16):
            listener.settimeout(1.0)
            try:
                conn, _ = listener.accept()
            except OSError:
                break
            with conn:
                conn.sendall(f"error preloading failed: {failure}\n".encode())
        raise
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                _fork_supervisor(conn, listener, selector)
            elif not os.read(sys.stdin.fileno(), 4096):
                return  # the launching process has ended
        _reap()


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _fork_supervisor(conn: socket.socket, listener: socket.socket,
                     selector: selectors.BaseSelector) -> None:
    with conn:
        conn.settimeout(REQUEST_TIMEOUT_S)
        try:
            request = read_line(conn)
        except (OSError, ValueError) as exc:
            _answer(conn, f"error {exc}")
            return
        if not request:
            return
        sys.stdout.flush()  # or what is buffered would be written by the child too
        sys.stderr.flush()
        try:
            supervisor = os.fork()
        except OSError as exc:
            _answer(conn, f"error fork failed: {exc}")
            return
        if supervisor == 0:
            selector.close()
            listener.close()
            _exit(lambda: _supervise(conn, request))


def _answer(conn: socket.socket, line: str) -> None:
    try:
        conn.sendall(f"{line}\n".encode())
    except OSError:
        pass  # the launcher gave up: without its go, a worker never starts the run


def _exit(body) -> None:
    """Run `body` in a forked child and leave the process without unwinding into the server's
    frames (its sockets and loops are the parent's)."""
    code = 1
    try:
        code = body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported on stderr, the process ends either way
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _supervise(conn: socket.socket, request: str) -> int:
    name_process(SUPERVISOR_NAME)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C of the group is the worker's to handle
    null = os.open(os.devnull, os.O_RDONLY)  # not the server's input: the launcher's pipe
    os.dup2(null, sys.stdin.fileno())
    os.close(null)
    gate, opener = os.pipe()
    try:
        worker = os.fork()
    except OSError as exc:
        _answer(conn, f"error fork failed: {exc}")
        return 1
    if worker == 0:
        conn.close()
        os.close(opener)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _exit(lambda: _work(request, gate))
    os.close(gate)
    _answer(conn, f"pid {worker}")
    try:
        go = read_line(conn) == "go"  # the launcher has recorded the worker on the run
    except (OSError, ValueError):
        go = False
    conn.close()
    if go:
        os.write(opener, b"g")
    os.close(opener)  # without "go": the worker reads nothing and ends before the run
    _, status = os.waitpid(worker, 0)
    if go:
        _report_unfinished(request, worker, os.waitstatus_to_exitcode(status))
    return 0


def _work(request: str, gate: int) -> int:
    """`dagster api execute_run REQUEST` in this process, once the supervisor says go."""
    name_process(WORKER_NAME)
    if os.read(gate, 1) != b"g":
        return 0
    os.close(gate)
    from dagster._cli.api import execute_run_command

    execute_run_command.main([request], prog_name="dagster api execute_run",
                             standalone_mode=False)
    return 0


def _report_unfinished(request: str, pid: int, code: int) -> None:
    """Report the run of a worker that ended without ending it: failed (as the code server
    does), or canceled if it was being canceled."""
    from dagster import DagsterInstance, DagsterRunStatus
    from dagster._grpc.types import ExecuteRunArgs
    from dagster._serdes import deserialize_value
    from dagster._utils import get_run_crash_explanation

    args = deserialize_value(request, ExecuteRunArgs)
    with DagsterInstance.from_ref(args.instance_ref) as instance:
        run = instance.get_run_by_id(args.run_id)
        if run is None or run.is_finished:
            return
        prefix = f"Run worker process {pid} for {run.run_id}"
        message = (f"{prefix} exited without ending the run." if code == 0
                   else get_run_crash_explanation(prefix=prefix, exit_code=code))
        instance.report_engine_event(message, run)
        if run.status == DagsterRunStatus.CANCELING:
            instance.report_run_canceled(run, message)
        else:
            instance.report_run_failed(run)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m lakelog.assets.prefork SOCKET_PATH [MODULE...]", file=sys.stderr)
        return 2
    try:
        serve(argv[0], argv[1:])
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
