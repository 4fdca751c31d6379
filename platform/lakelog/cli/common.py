"""What the commands share: the lake of ``--home``, output as text or ``--json``, times."""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone
from typing import Any

from lakelog.errors import LakelogError
from lakelog.lake import EmbeddedLake


def now() -> datetime:
    return datetime.now(timezone.utc)


def timestamp(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise LakelogError(f"not an ISO timestamp: {text!r} (e.g. 2026-01-05T08:00:00Z)") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def lake(args: argparse.Namespace) -> EmbeddedLake:
    """The lake at ``--home``; its Spark session is opened on first use only."""

    def start_spark():
        from lakelog.spark.server import ServerConfig
        from lakelog.spark.session import open_session

        return open_session(
            master=args.master, remote=args.remote, app_name=f"lakelog-{args.command}",
            server=ServerConfig.from_environment(os.environ),
        )

    return EmbeddedLake(start_spark, args.home)


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text)
