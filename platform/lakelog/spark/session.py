"""Building the SparkSession lakelog expects.

Engine functions never create sessions; the CLI, the Dagster resource and the tests build one
here so that every entry point runs with the same settings. A session is one of three kinds:
a Spark Connect session to `remote`, a classic in-process session on `master`, or (neither
given) a Spark Connect session to the local server lakelog manages (`lakelog.spark.server`).
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import sys
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pyspark.sql import SparkSession
from pyspark.sql.connect.client.retries import DefaultPolicy

from lakelog.spark import java_lookups

if TYPE_CHECKING:
    from lakelog.spark.server import ServerConfig

LOG4J = Path(__file__).with_name("log4j2.properties")
#: The local Connect server's logging: warnings, and where it listens once started.
SERVER_LOG4J = Path(__file__).with_name("server-log4j2.properties")

#: Settings the engine relies on: UTC session time (event times are instants), Parquet timestamps
#: that every Delta reader understands, small shuffles suited to microbatches, and local rows
#: sent inside the plan.
REQUIRED_CONF: Mapping[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "4096",
    # Over Spark Connect, `createDataFrame` of local rows of at least this many bytes uploads
    # them as an artifact, which the server keeps in its block manager; smaller rows travel
    # inside the plan. Spark 4.0 defaults to 64 MB, 4.1 and 4.2 to 1 MB; on 4.2 (measured)
    # such an uploaded relation outlived its session: once the session had also persisted a
    # frame, the relation's blocks stayed after the session was released, for the life of the
    # server (the 100,000-event demo left 12 blocks, about 23 MB, each run:
    # `benchmarks/bench_server_memory.py`). The threshold counts Arrow bytes; lakelog's held
    # tables (at most 1 MB of Parquet) go inside the plan, which may be up to 128 MB (the
    # server's ``spark.connect.grpc.maxInboundMessageSize``).
    "spark.sql.session.localRelationCacheThreshold": str(64 * 2**20),
}

#: The JIT's inlining, shallower than HotSpot's (C2: 6 levels, not 15; a hot callee of at most 50
#: bytecodes, not 325; C1: 6 levels and 20 bytecodes, not 9 and 35). With generated code off,
#: Spark's expressions are interpreted through megamorphic calls that inlining cannot remove, and
#: a fresh JVM's compiler threads took a third of its CPU compiling deep inlined trees: the
#: 100,000-event demo on a fresh server took 62-63 s against 69-79 s with HotSpot's inlining,
#: the server's CPU 82 s against 101-116 s, and a warm server's demo the same 45 s
#: (`benchmarks/bench_codegen.py`, setting ``hotspot_inlining``: docs/spark.md).
SHALLOW_INLINING = ("-XX:MaxInlineLevel=6 -XX:FreqInlineSize=50 -XX:InlineSmallCode=500 "
                    "-XX:MaxInlineSize=20 -XX:C1MaxInlineLevel=6 -XX:C1MaxInlineSize=20")

#: Defaults for a local session; any of them can be overridden.
LOCAL_DEFAULTS: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "4g",
    "spark.sql.adaptive.enabled": "true",
    # Sides that are each a single partition join without a shuffle, whatever their estimated
    # size. By default Spark shuffles them when one is estimated over 128 MB, as rows from a
    # join often are (Spark estimates a join as the product of its sides). lakelog puts only
    # few rows in one partition (`lakelog.lake.one_partition`).
    "spark.sql.maxSinglePartitionBytes": f"{2**63 - 1}b",
    # Each ingest generates ~120 classes; with Spark's default cache of 100 every round would
    # evict and recompile (and re-JIT) all of them. Static: takes effect at session start.
    "spark.sql.codegen.cache.maxEntries": "2000",
    # No generated code: expressions are interpreted. A microbatch's plans carry its own
    # literals (bounds, watermarks, times), so most of its code was new every batch: compiled
    # by Janino, loaded, then JIT-compiled again — 6 to 27 compilations per 1,000-record batch,
    # and the JIT threads took a sixth of the server's CPU. Measured on the 100k demo
    # (benchmarks/bench_codegen.py): 11-22 % less server CPU and 7-19 % less time; one large
    # batch is slower (a 100k-event ingest 27 %): docs/spark.md.
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.summary.metadata.level": "NONE",
    # PySpark 4 otherwise records the Python call site of every Column function for error
    # messages: several JVM round trips per call, a quarter of a windowed microbatch's driver
    # time. Spark's own error (with the plan) is still raised; only the Python line is left out.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J.as_uri()} "
                                     f"{SHALLOW_INLINING}",
}


def session_conf(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The full configuration: local defaults, then overrides, then the settings lakelog needs."""
    conf = dict(LOCAL_DEFAULTS)
    conf.update(overrides or {})
    conf.update(REQUIRED_CONF)
    return conf


def create_session(
    *,
    master: str = "local[*]",
    remote: str | None = None,
    app_name: str = "lakelog",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start (or reuse) a SparkSession: classic with `master`, or Spark Connect with `remote`.

    `remote` is a Spark Connect URL such as ``sc://spark-connect:15002``.
    """
    builder = SparkSession.builder.appName(app_name)
    builder = builder.remote(remote) if remote else builder.master(master)
    if not remote:  # local Python workers (pattern matching) run this interpreter, with lakelog
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # A Connect server owns its cluster settings; the client sends only what lakelog requires.
    settings = {**(conf or {}), **REQUIRED_CONF} if remote else session_conf(conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not remote:
        spark.sparkContext.setLogLevel("ERROR")
        java_lookups.keep(spark.sparkContext._jvm)
    elif on_loopback(remote):
        # Reattachable execution lets a query's results survive a broken network stream: the
        # server keeps them until the client releases them, in an RPC of its own after each
        # query. Between processes of one machine there is no network to break, and that
        # bookkeeping cost 2-6 ms of every round trip on a warm server, and 2-5 ms of the
        # client's CPU (benchmarks/bench_reattach.py).
        spark.client.disable_reattachable_execute()
    if remote and spark not in _CONFIGURED:  # built now, not handed out again
        # Registered now, after the client's own exit handler: handlers run newest first, so
        # the session is released before that one sends its clean-up under the client's retries.
        atexit.register(release_at_exit, weakref.ref(spark), os.getpid())
    _CONFIGURED.add(spark)
    return spark


def on_loopback(remote: str) -> bool:
    """Whether Spark Connect URL `remote` (``sc://host:port/;params``) names this machine."""
    host = urlsplit(remote).hostname
    return host is not None and is_loopback(host)


def is_loopback(host: str) -> bool:
    """Whether `host` (an address, or a name) is this machine's loopback: any other name may be
    any host."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


#: Sessions built here, which have `REQUIRED_CONF`: code given one needs not set any of it again.
_CONFIGURED: weakref.WeakSet[SparkSession] = weakref.WeakSet()

#: How long a process's exit waits for a server to take a session's release.
RELEASE_TIMEOUT_S = 5.0


def release_at_exit(ref: weakref.ref[SparkSession], pid: int) -> None:
    """Release a Spark Connect session as process `pid`, which built it, exits.

    A server keeps a session that is not released until it has been idle for an hour (Spark
    Connect's ``spark.connect.session.manager.defaultSessionTimeout``), and with it what the
    session holds: its local checkpoints, in the server's memory. Every `lakelog` command and
    every Dagster run is a process of its own with a session, so a server under `dagster dev`
    kept the data of each run of the last hour. (pyspark 4.2 can release at exit itself, with
    ``SPARK_CONNECT_RELEASE_SESSION_ON_EXIT``; 4.0 and 4.1 cannot.)

    Not in a forked child of `pid`, which inherited the session and does not own it. Not
    retried, and not waited for beyond `RELEASE_TIMEOUT_S`: a server that is gone has nothing
    left to release, and one that does not answer keeps the session for its idle hour, as it
    would have without this; the client is closed then, so that its own exit handler sends
    nothing either."""
    spark = ref()
    if spark is None or pid != os.getpid() or spark.is_stopped:
        return
    spark.client.set_retry_policies([])
    stopping = threading.Thread(target=_stop_quietly, args=(spark,), daemon=True,
                                name="lakelog-release-session")
    stopping.start()
    stopping.join(RELEASE_TIMEOUT_S)
    if stopping.is_alive():
        with contextlib.suppress(Exception):
            spark.client.close()


def _stop_quietly(spark: SparkSession) -> None:
    with contextlib.suppress(Exception):  # the process ends either way
        spark.stop()  # releases the session (best effort), then closes the client


def over_connect(spark_object: object) -> bool:
    """Whether a session or DataFrame is Spark Connect's (a client of a server) rather than a
    session of this process's own JVM."""
    return type(spark_object).__module__.startswith("pyspark.sql.connect")


def has_required_conf(spark: SparkSession) -> bool:
    """Whether `spark` was built here (`create_session`), so that `REQUIRED_CONF` is set on it
    (setting a conf again is a round trip over Spark Connect)."""
    return spark in _CONFIGURED


def open_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    server: ServerConfig | None = None,
    app_name: str = "lakelog",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A session on `remote`, else classic on `master`, else on the local server (`server`).

    The local server is started first if none answers at its port (`ensure_running`). A
    session opened before is handed out again, without asking the server anew, while the
    server process it was opened on lives (`server_pid`: its pid file and, where /proc is,
    its command line). A session of a server that has died since is not handed out again: it
    lived in that server (its cached frames and temporary views with it), so a new one is
    opened on the new server. Its client gives up at once while the server process is dead,
    instead of retrying for the ten minutes Spark Connect allows a remote server, so the caller
    can restart its work.
    """
    if remote or master:
        return create_session(master=master or "local[*]", remote=remote, app_name=app_name,
                              conf=conf)
    from lakelog.spark.server import ServerConfig, ensure_running, server_pid

    config = server or ServerConfig()
    settings = (app_name, dict(conf or {}))
    with _OPENING:  # steps of a run on threads open their sessions one at a time
        known = _OPENED.get(config.url)
        # Its settings are applied: opening again would be a round trip per step.
        reusable = known is not None and known[2] == settings and not known[1].is_stopped
        if reusable and known[0] is not None and server_pid(config) == known[0]:
            # The server it was opened on still lives, and answered then: asking it again
            # which sockets it listens on (`ensure_running`, ~12 ms of /proc) only costs.
            return known[1]
        pid = ensure_running(config).pid
        if known is not None and known[0] != pid:  # opened on a server that has died since
            known[1].release_session_on_close = False  # nothing left to release there
            known[1].stop()  # so that getOrCreate opens a new one
        elif reusable:
            return known[1]
        spark = create_session(remote=config.url, app_name=app_name, conf=conf)
        if known is None or known[1] is not spark:
            spark.client.set_retry_policies([_WhileServerLives(config)])
        _OPENED[config.url] = (pid, spark, settings)
        return spark


#: Per local server URL: the server process (pid) the last session opened on it belongs to, the
#: session, and the settings (app name, conf) it was last opened with.
_OPENED: dict[str, tuple[int | None, SparkSession, tuple[str, dict[str, str]]]] = {}
_OPENING = threading.Lock()


class _WhileServerLives(DefaultPolicy):
    """Spark Connect's default retries, but none once the local server's process is dead."""

    def __init__(self, config: ServerConfig) -> None:
        super().__init__()
        self._config = config

    def can_retry(self, e: BaseException) -> bool:
        from lakelog.spark.server import status

        return super().can_retry(e) and status(self._config).alive


def server_lost(exc: BaseException) -> bool:
    """Whether `exc` says the Spark Connect server went away (unreachable, or restarted and so
    without the session, or the session closed because its server was replaced — by
    `open_session` on another thread): work that failed so can be run again on a new session."""
    from pyspark.errors import PySparkException
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    if not isinstance(exc, PySparkException):
        return False
    if exc.getCondition() in ("INVALID_HANDLE.SESSION_CHANGED", "INVALID_HANDLE.SESSION_NOT_FOUND",
                              "RETRIES_EXCEEDED", "NO_ACTIVE_SESSION"):
        return True
    if not isinstance(exc, SparkConnectGrpcException):
        return False
    code = getattr(exc, "_grpc_status_code", None)  # no public getter before pyspark 4.1
    if code is None:  # pyspark 4.0 keeps only the message; the gRPC error is its context
        call = exc.__context__
        code = call.code() if callable(getattr(call, "code", None)) else None
    return getattr(code, "name", None) == "UNAVAILABLE"
