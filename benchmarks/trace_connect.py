"""Count the Spark Connect round trips a lakelog command makes, and where it makes them.

Over Spark Connect every analysis (a schema, `df.columns`), every execution (a write, a count,
a collect) and every config look-up is a gRPC round trip, and each costs milliseconds even when
Spark does nothing. This wraps the client's calls, runs a `lakelog` command in this process
(`python benchmarks/trace_connect.py demo --events 5000 --no-source`), and prints JSON to
stderr's neighbour stdout: round trips and seconds per kind, and per lakelog call site (the
innermost frame under platform/lakelog), most expensive first.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from collections import defaultdict
from pathlib import Path

from pyspark.sql.connect.client import core

PACKAGE = str(Path(__file__).resolve().parents[1] / "platform" / "lakelog")
#: The Dagster definitions (`lakelog.assets`): a round trip under one belongs to that step.
ASSETS = str(Path(__file__).resolve().parents[1] / "assets")
CALLS = {"_analyze": "analyze", "_execute_and_fetch": "execute", "_execute": "execute",
         "config": "config"}

trips: dict[tuple[str, str], list[float]] = defaultdict(list)
steps: dict[str, list[float]] = defaultdict(list)
#: Per step, its round trips by call site (kind and site), as `trips` is for the whole command.
step_sites: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))


def call_site() -> str:
    """The innermost lakelog frame, and for one in the lake engine (`lake/`) the frame that
    called the engine too: a write is known by what it writes."""
    found = []
    for frame in reversed(traceback.extract_stack()[:-2]):
        if frame.filename.startswith(PACKAGE):
            name = frame.filename[len(PACKAGE) + 1:]
            found.append(f"{name}:{frame.lineno} {frame.name}")
            if not name.startswith("lake/"):
                break
    return " < ".join(found[:1] + found[-1:] if len(found) > 1 else found) or "(outside lakelog)"


#: Per thread: whether a traced call is under way (a pipeline run's steps run on threads).
_inside = threading.local()


def step() -> str:
    """The step the round trip was made in: the key the threaded executor runs
    (`lakelog.assets.executor._run_step`), else the asset function it was made under."""
    frame, body = sys._getframe(2), None
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(ASSETS):
            if code.co_name == "_run_step" and "key" in frame.f_locals:
                return str(frame.f_locals["key"])
            body = body or f"{code.co_filename[len(ASSETS) + 1:]} {code.co_name}"
        frame = frame.f_back
    return body or "(no step)"


def traced(name: str, kind: str):
    inner = getattr(core.SparkConnectClient, name)

    def wrapper(self, *args, **kwargs):
        if getattr(_inside, "call", False):  # _execute_and_fetch may call _execute: count once
            return inner(self, *args, **kwargs)
        _inside.call = True
        started = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            _inside.call = False
            label = kind if kind != "analyze" else f"analyze {args[0] if args else ''}"
            took = time.perf_counter() - started
            site, where = call_site(), step()
            trips[(label, site)].append(took)
            steps[where].append(took)
            step_sites[where][(label, site)].append(took)

    setattr(core.SparkConnectClient, name, wrapper)


def report(wall: float) -> dict:
    by_kind: dict[str, list[float]] = defaultdict(list)
    for (kind, _), times in trips.items():
        by_kind[kind.split()[0]].extend(times)
    sites = sorted(trips.items(), key=lambda kv: -sum(kv[1]))
    return {
        "wall_s": round(wall, 2),
        "round_trips": sum(len(t) for t in trips.values()),
        "round_trip_s": round(sum(sum(t) for t in trips.values()), 2),
        "by_kind": {k: {"n": len(t), "s": round(sum(t), 2)} for k, t in by_kind.items()},
        "sites": [{"kind": kind, "site": site, "n": len(t), "s": round(sum(t), 3)}
                  for (kind, site), t in sites[:40]],
        "steps": [{"step": name, "n": len(t), "s": round(sum(t), 3),
                   "sites": [{"kind": kind, "site": site, "n": len(ts), "s": round(sum(ts), 3)}
                             for (kind, site), ts in sorted(step_sites[name].items(),
                                                             key=lambda kv: -sum(kv[1]))[:6]]}
                  for name, t in sorted(steps.items(), key=lambda kv: -sum(kv[1]))],
    }


def main(argv: list[str]) -> int:
    for name, kind in CALLS.items():
        traced(name, kind)
    from lakelog.cli.main import main as lakelog

    started = time.perf_counter()
    code = lakelog(argv)
    print(json.dumps(report(time.perf_counter() - started), indent=1))
    return code or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
