"""`lakelog spark start|stop|status`: the local Spark Connect server every run and command uses.

Settings come from the options, else ``$LAKELOG_SPARK_SERVER_{PORT,HOST,MASTER,CORES,MEMORY,DIR}``
(`lakelog.spark.server.ServerConfig.from_environment`); the runs and commands that start the
server on first use read the same variables, so set them once for the machine.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

from lakelog.spark.server import ServerConfig, ServerStatus, ensure_running, status, stop

#: `lakelog spark status`'s exit code when no server answers (as `systemctl status` says 3).
NOT_RUNNING = 3

Emit = Callable[[argparse.Namespace, Any, str], None]


def _config(args: argparse.Namespace) -> ServerConfig:
    return ServerConfig.from_environment(
        os.environ, port=args.port, cores=getattr(args, "cores", None),
        memory=getattr(args, "memory", None), master=getattr(args, "master", None),
    )


def _describe(found: ServerStatus) -> str:
    state = "running" if found.healthy else "starting" if found.alive else "not running"
    lines = [f"Spark Connect server at {found.url}: {state}"]
    if found.alive:
        lines.append(f"  pid {found.pid}, master {found.master}, memory {found.memory}, "
                     f"started {found.started_at}")
    lines.append(f"  log {found.log}")
    return "\n".join(lines)


def _round_trip(url: str) -> dict[str, Any]:
    """Spark's version and a round trip's time through a real Connect session."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(url).getOrCreate()
    try:
        started = time.perf_counter()
        version = session.version
        return {"spark_version": version,
                "round_trip_ms": round((time.perf_counter() - started) * 1000, 1)}
    finally:
        session.stop()  # released: the server keeps nothing of the check


def cmd_start(args: argparse.Namespace, emit: Emit) -> int:
    found = ensure_running(_config(args), timeout=args.timeout)
    emit(args, found.as_dict(), _describe(found))
    return 0


def cmd_status(args: argparse.Namespace, emit: Emit) -> int:
    found = status(_config(args))
    data: dict[str, Any] = found.as_dict()
    text = _describe(found)
    if found.healthy:
        data.update(_round_trip(found.url))
        text += f"\n  Spark {data['spark_version']}, round trip {data['round_trip_ms']} ms"
    emit(args, data, text)
    return 0 if found.healthy else NOT_RUNNING


def cmd_stop(args: argparse.Namespace, emit: Emit) -> int:
    config = _config(args)
    found = stop(config, timeout=args.timeout)
    if found is None:
        emit(args, {"url": config.url, "stopped": False}, f"no Spark server at {config.url}")
    else:
        emit(args, {**found.as_dict(), "stopped": True},
             f"stopped the Spark Connect server at {found.url} (pid {found.pid})")
    return 0


def add_spark_commands(
    sub: argparse._SubParsersAction, emit: Emit, parser_class: type[argparse.ArgumentParser]
) -> None:
    """Add `spark start|stop|status` to the `lakelog` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--port", type=int, default=None,
                        help="its port (default: $LAKELOG_SPARK_SERVER_PORT, else 15002)")
    spark = sub.add_parser("spark", help="the local Spark Connect server runs and commands use")
    actions = spark.add_subparsers(dest="action", required=True, parser_class=parser_class)

    start = actions.add_parser("start", parents=[common],
                               help="start it unless it runs (bound to 127.0.0.1)")
    start.add_argument("--cores", type=int, help="local threads (default: every core)")
    start.add_argument("--memory", help="driver memory (default: 4g)")
    start.add_argument("--master", help="a cluster's master instead of local threads, "
                       "e.g. spark://127.0.0.1:7077")
    start.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for it")
    start.set_defaults(func=lambda args: cmd_start(args, emit))

    check = actions.add_parser("status", parents=[common], help="is it running and answering")
    check.set_defaults(func=lambda args: cmd_status(args, emit))

    halt = actions.add_parser("stop", parents=[common], help="stop it")
    halt.add_argument("--timeout", type=float, default=30.0,
                      help="seconds before a SIGTERM becomes a SIGKILL")
    halt.set_defaults(func=lambda args: cmd_stop(args, emit))
