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
import time
import traceback
from collections import defaultdict
from pathlib import Path

from pyspark.sql.connect.client import core

PACKAGE = str(Path(__file__).resolve().parents[1] / "platform" / "lakelog")
CALLS = {"_analyze": "analyze", "_execute_and_fetch": "execute", "_execute": "execute",
         "config": "config"}

trips: dict[tuple[str, str], list[float]] = defaultdict(list)


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


def traced(name: str, kind: str):
    inner = getattr(core.SparkConnectClient, name)
    depth = {"n": 0}

    def wrapper(self, *args, **kwargs):
        if depth["n"]:  # _execute_and_fetch may call _execute: count the outer call only
            return inner(self, *args, **kwargs)
        depth["n"] += 1
        started = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            depth["n"] -= 1
            label = kind if kind != "analyze" else f"analyze {args[0] if args else ''}"
            trips[(label, call_site())].append(time.perf_counter() - started)

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
