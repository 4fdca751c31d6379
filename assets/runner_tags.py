"""The tags naming the `lakelog` process that executes a run in-process (`lakelog run`,
`lakelog demo`: `lakelog.assets.runner`), and whether that process is gone. No Dagster import:
the run launcher, which every process of an instance loads, asks too."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

RUNNER_HOST, RUNNER_PID = "lakelog/runner_host", "lakelog/runner_pid"


def runner_tags() -> dict[str, str]:
    """This process, as the runner of the runs it executes."""
    return {RUNNER_HOST: socket.gethostname(), RUNNER_PID: str(os.getpid())}


def runner_gone(tags: Mapping[str, str]) -> str | None:
    """Why a run with these tags can never end by itself — its lakelog process on this host has
    ended — or None (running, another host's, or not a runner's run)."""
    host, pid = tags.get(RUNNER_HOST), tags.get(RUNNER_PID, "")
    if host != socket.gethostname() or not pid.isdigit() or _alive(int(pid)):
        return None
    return f"its lakelog process {pid} on {host} ended without finishing it"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
