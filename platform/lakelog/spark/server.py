"""The local Spark Connect server lakelog manages: one warm Spark for every run, sensor and command.

A Dagster run, a sensor tick or a CLI command that starts its own JVM pays seconds of start-up
and a cold JIT, and several at once overload a small machine. Instead, lakelog starts one Spark
Connect server (pyspark ships it) and every process connects to it at ``sc://127.0.0.1:<port>``.

The server is a detached ``spark-submit`` of ``SparkConnectServer``, bound to 127.0.0.1 (gRPC
and the driver's own ports) unless configured otherwise. Its files live in `state_dir`, one set
per port: ``server-<port>.pid`` (and ``.json``: how it was started), ``.log`` and ``.lock``.
`ensure_running` starts it under an exclusive file lock, so two processes that find no server at
once never start two: the second waits for the first one's server and connects to it.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyspark

from lakelog.errors import ConfigError, LakelogError
from lakelog.procfs import stat_fields
from lakelog.spark import class_archive
from lakelog.spark.session import SERVER_LOG4J, SHALLOW_INLINING, is_loopback, session_conf

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
DEFAULT_DIR = Path.home() / ".lakelog" / "spark"
#: The parallel collector: the JVM's default (G1) does part of its work in concurrent threads and
#: barriers, which on a small machine take cores from the queries; the 100k demo took 17 % less
#: time and its server 22 % less CPU with it (`benchmarks/bench_codegen.py`, setting ``g1_gc``:
#: docs/spark.md).
PARALLEL_GC = "-XX:+UseParallelGC"
#: The server JVM's flags: the parallel collector and shallow inlining (`SHALLOW_INLINING`).
DEFAULT_JAVA_OPTIONS = f"{PARALLEL_GC} {SHALLOW_INLINING}"


class ServerError(LakelogError):
    """The local Spark Connect server could not be started, reached or stopped."""


@dataclass(frozen=True)
class ServerConfig:
    """How the local server runs: where it listens, on which Spark master, with what memory.

    `cores` sets a local master's threads (``local[<cores>]``); `master` may instead name a
    cluster (``spark://127.0.0.1:7077``). `conf` adds Spark settings; lakelog's required ones win.
    `java_options` are the server JVM's own flags: by default the parallel garbage collector
    and shallow inlining (`DEFAULT_JAVA_OPTIONS`). `class_archives` is the folder of the
    servers' class-data sharing archives (`lakelog.spark.class_archive`), None for none.
    """

    port: int = DEFAULT_PORT
    host: str = "127.0.0.1"
    master: str = "local[*]"
    memory: str = "4g"
    state_dir: Path = DEFAULT_DIR
    conf: Mapping[str, str] = field(default_factory=dict)
    java_options: str = DEFAULT_JAVA_OPTIONS
    class_archives: Path | None = class_archive.ARCHIVE_DIR

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"Spark server port {self.port} is not a TCP port")

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str], *, port: int | None = None, cores: int | None = None,
        memory: str | None = None, master: str | None = None,
    ) -> ServerConfig:
        """Arguments first, then
        ``LAKELOG_SPARK_SERVER_{PORT,HOST,MASTER,CORES,MEMORY,DIR,JAVA_OPTIONS,CLASS_ARCHIVES}``
        (``CLASS_ARCHIVES=off``: none)."""
        env = {k[len("LAKELOG_SPARK_SERVER_"):]: v for k, v in environ.items()
               if k.startswith("LAKELOG_SPARK_SERVER_") and v}
        try:
            port = port or int(env.get("PORT", DEFAULT_PORT))
            cores = cores or (int(env["CORES"]) if "CORES" in env else None)
        except ValueError as exc:
            raise ConfigError(f"LAKELOG_SPARK_SERVER_PORT/CORES must be whole numbers: {exc}") from exc
        if cores is not None and cores < 1:
            raise ConfigError(f"Spark server cores must be at least 1, not {cores}")
        master = master or env.get("MASTER") or (f"local[{cores}]" if cores else "local[*]")
        return cls(
            port=port,
            host=env.get("HOST", "127.0.0.1"),
            master=master,
            memory=memory or env.get("MEMORY", "4g"),
            state_dir=Path(env["DIR"]) if "DIR" in env else DEFAULT_DIR,
            java_options=env.get("JAVA_OPTIONS", DEFAULT_JAVA_OPTIONS),
            class_archives=(None if env.get("CLASS_ARCHIVES") == "off" else
                            Path(env.get("CLASS_ARCHIVES", class_archive.ARCHIVE_DIR)).expanduser()),
        )

    @property
    def client_host(self) -> str:
        """Where a client on this machine reaches it (a wildcard bind answers on loopback)."""
        return "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host

    @property
    def url(self) -> str:
        return f"sc://{self.client_host}:{self.port}"

    def file(self, suffix: str) -> Path:
        return self.state_dir / f"server-{self.port}.{suffix}"

    def command(self, extra_java_options: Sequence[str] = ()) -> list[str]:
        """The spark-submit command line of the server (its JVM's flags, then `extra_java_options`)."""
        conf = session_conf(self.conf)
        conf.pop("spark.driver.memory", None)  # --driver-memory: it sizes the JVM at launch
        conf["spark.driver.extraJavaOptions"] = " ".join(
            [f"-Dlog4j2.configurationFile={SERVER_LOG4J.as_uri()}", *self.java_options.split(),
             *extra_java_options])
        conf["spark.connect.grpc.binding.address"] = self.host
        conf["spark.connect.grpc.binding.port"] = str(self.port)
        if is_loopback(self.host):  # the driver's RPC and block manager ports too
            conf.setdefault("spark.driver.bindAddress", self.host)
            conf.setdefault("spark.driver.host", self.host)
        submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
        args = [str(submit), "--class", SERVER_CLASS, "--name", f"lakelog-spark-{self.port}",
                "--master", self.master, "--driver-memory", self.memory]
        for key, value in sorted(conf.items()):
            args += ["--conf", f"{key}={value}"]
        return [*args, "spark-internal"]


@dataclass(frozen=True)
class ServerStatus:
    """What `status` found: the recorded process, whether it lives and whether its port answers."""

    url: str
    pid: int | None
    alive: bool
    answering: bool
    log: str
    started_at: str | None = None
    master: str | None = None
    memory: str | None = None

    @property
    def healthy(self) -> bool:
        return self.alive and self.answering

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "healthy": self.healthy}


def listening_sockets(pid: int) -> set[tuple[str, int]] | None:
    """The (address, port) pairs process `pid` listens on; None without Linux's /proc."""
    fds = Path(f"/proc/{pid}/fd")
    if not Path("/proc/net/tcp").exists():
        return None
    inodes = set()
    try:
        for fd in fds.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    except OSError:
        return set()
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            (address, port), state, inode = fields[1].split(":"), fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                found.add((_ip(address), int(port, 16)))
    return found


def _ip(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))  # little-endian words
    return socket.inet_ntop(socket.AF_INET6, words).removeprefix("::ffff:")


def _answers(config: ServerConfig, pid: int) -> bool:
    """Whether the server `pid` itself listens on its port (not some other process)."""
    sockets = listening_sockets(pid)
    if sockets is not None:
        return any(port == config.port for _, port in sockets)
    try:  # no /proc: whoever answers the port is taken for the server
        with socket.create_connection((config.client_host, config.port), timeout=0.5):
            return True
    except OSError:
        return False


def server_pid(config: ServerConfig) -> int | None:
    """The recorded pid, if that process still lives and is this port's Spark Connect server."""
    try:
        pid = int(config.file("pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's: the cmdline check below tells whether it is ours
    proc = Path(f"/proc/{pid}")
    if not proc.exists():  # no /proc (macOS): trust a live pid
        return pid
    fields = stat_fields(pid)
    if not fields or fields[0] == "Z":  # gone, or killed and not reaped yet by its parent
        return None
    try:
        cmdline = proc.joinpath("cmdline").read_bytes().decode(errors="replace")
    except FileNotFoundError:
        return None
    # Empty while the launcher scripts exec the JVM; otherwise it must name this server.
    if cmdline and (SERVER_CLASS not in cmdline or f"binding.port={config.port}" not in cmdline):
        return None  # the pid was reused by another process
    return pid


def status(config: ServerConfig) -> ServerStatus:
    pid = server_pid(config)
    try:
        info = json.loads(config.file("json").read_text()) if pid else {}
    except (FileNotFoundError, ValueError):
        info = {}
    return ServerStatus(
        url=config.url,
        pid=pid,
        alive=pid is not None,
        answering=pid is not None and _answers(config, pid),
        log=str(config.file("log")),
        started_at=info.get("started_at"),
        master=info.get("master"),
        memory=info.get("memory"),
    )


@contextmanager
def _locked(config: ServerConfig, timeout: float) -> Iterator[None]:
    """An exclusive lock on the port's lock file: one starter or stopper at a time."""
    config.state_dir.mkdir(parents=True, exist_ok=True)
    with open(config.file("lock"), "a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServerError(f"another process holds {config.file('lock')} "
                                      f"for more than {timeout:.0f} s") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _log_tail(config: ServerConfig, lines: int = 15) -> str:
    try:
        return "\n".join(config.file("log").read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def ensure_running(config: ServerConfig, *, timeout: float = 180.0) -> ServerStatus:
    """The server's status, after starting it if no server of this port answers.

    Under the lock: a second process arriving while the first starts the server waits for it
    and then finds it answering. A recorded server that died (killed, out of memory) is
    replaced; a live one that does not answer yet is still starting, and is waited for.
    """
    found = status(config)
    if found.healthy:
        return found
    with _locked(config, timeout):
        found = status(config)
        if found.alive:
            return _wait_until_answering(config, timeout)
        sharing = _spawn(config)
        try:
            started = _wait_until_answering(config, timeout)
        except ServerError:
            if server_pid(config) is None:  # it exited while starting: an archive of its
                class_archive.keep(sharing, ended_of_itself=False)  # few classes, not kept
            raise
        if started.pid is not None:
            class_archive.forget_if_unmapped(sharing, started.pid)
        return started


def _spawn(config: ServerConfig) -> list[str]:
    """Start the server's JVM, detached; its class-data sharing flags."""
    log = open(config.file("log"), "ab")
    try:
        log.write(f"\n--- lakelog: starting the Spark Connect server at {config.url} "
                  f"({datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ})\n".encode())
        log.flush()
        # Its Python workers (pattern matching runs there) use this interpreter, which has
        # lakelog installed, unless the environment names another.
        env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
        if is_loopback(config.host):
            env["SPARK_LOCAL_IP"] = config.host
        sharing = class_archive.java_options(config.class_archives, config.port,
                                             config.java_options)
        process = subprocess.Popen(
            config.command(sharing), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True,  # outlives this process and its terminal's signals
            env=env,
        )
    finally:
        log.close()
    config.file("pid").write_text(f"{process.pid}\n")
    config.file("json").write_text(json.dumps({
        "pid": process.pid, "url": config.url, "master": config.master, "memory": config.memory,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "class_sharing": sharing,
    }))
    return sharing


def _wait_until_answering(config: ServerConfig, timeout: float) -> ServerStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = status(config)
        if found.healthy:
            return found
        if not found.alive:
            raise ServerError(f"the Spark Connect server at {config.url} exited while starting; "
                              f"the end of {config.file('log')}:\n{_log_tail(config)}")
        time.sleep(0.25)
    raise ServerError(f"the Spark Connect server at {config.url} did not answer within "
                      f"{timeout:.0f} s; see {config.file('log')}")


#: How long a server that writes its class-data sharing archive as it exits is given to end.
ARCHIVE_STOP_SECONDS = 120.0


def stop(config: ServerConfig, *, timeout: float = 30.0) -> ServerStatus | None:
    """Stop the server (SIGTERM, then SIGKILL after `timeout`, or `ARCHIVE_STOP_SECONDS` for
    one that writes its class archive); None if none was running."""
    with _locked(config, timeout):
        found = status(config)
        if found.pid is None:
            return None
        pid = found.pid
        try:
            sharing = json.loads(config.file("json").read_text()).get("class_sharing", [])
        except (FileNotFoundError, ValueError):
            sharing = []
        os.killpg(pid, signal.SIGTERM)  # the JVM leads its own session (start_new_session)
        if class_archive.writes(sharing):  # it writes its archive (~220 MB) as it exits
            timeout = max(timeout, ARCHIVE_STOP_SECONDS)
        deadline = time.monotonic() + timeout
        while server_pid(config) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        ended = server_pid(config) is None
        if not ended:
            os.killpg(pid, signal.SIGKILL)
            while server_pid(config) is not None:
                time.sleep(0.1)
        config.file("pid").unlink(missing_ok=True)
        class_archive.keep(sharing, ended_of_itself=ended)  # what it wrote as it exited
        return found
