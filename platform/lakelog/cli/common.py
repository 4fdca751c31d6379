"""What the commands share: the lake of ``--home``, output as text or ``--json``, times."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any

from lakelog.errors import LakelogError
from lakelog.lake import EmbeddedLake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def now() -> datetime:
    return datetime.now(timezone.utc)


def timestamp(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise LakelogError(f"not an ISO timestamp: {text!r} (e.g. 2026-01-05T08:00:00Z)") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def spark_session(args: argparse.Namespace) -> SparkSession:
    """The command's Spark session: the one its runs' Spark resource opens too (the same
    master, remote, server and settings), so a session opened here is the one they use."""
    from lakelog.spark.server import ServerConfig
    from lakelog.spark.session import open_session

    return open_session(
        master=args.master, remote=args.remote, app_name=f"lakelog-{args.command}",
        server=ServerConfig.from_environment(os.environ),
    )


def open_spark_meanwhile(args: argparse.Namespace) -> threading.Thread:
    """Open the command's Spark session on a thread of its own (starting the local server if
    none answers) while the command prepares the rest, for a command that will need Spark.

    A failure is left for the command's own first use of Spark to meet and report. The
    thread is not a daemon: a command that ends early still waits for a server it started to
    be recorded, rather than leave one running that `lakelog spark` does not know.
    """
    def open_quietly() -> None:
        with contextlib.suppress(Exception):
            spark_session(args)

    thread = threading.Thread(target=open_quietly, name="lakelog-open-spark")
    thread.start()
    return thread


def lake(args: argparse.Namespace) -> EmbeddedLake:
    """The lake at ``--home``; its Spark session is opened on first use only."""
    return EmbeddedLake(partial(spark_session, args), args.home)


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text)
