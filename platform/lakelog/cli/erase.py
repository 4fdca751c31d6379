"""`lakelog erase --subject KEY`: one data subject removed from everything the lake holds.

The erasure itself is `lakelog.erasure.erase_subject`; then, unless ``--no-run``, one pipeline
run (through Dagster, as `lakelog run`) recomputes what the erasure left to recompute — the
consumers it rebuilt from the log, the SQL models whose inputs changed — and the lake is
searched for the subject again: the command fails if any table still holds it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from lakelog.cli.common import lake, now
from lakelog.cli.pipelines import resolve
from lakelog.erasure import erase_subject, find_subject
from lakelog.errors import LakelogError

Emit = Callable[[argparse.Namespace, Any, str], None]


def add_erase_command(sub: Any, common: argparse.ArgumentParser, emit: Emit,
                      source_dsn: Callable[[argparse.ArgumentParser], None]) -> None:
    erase = sub.add_parser(
        "erase", parents=[common],
        help="remove one data subject (a user id, a key) from every table, copy and landing "
        "file, and write an erasure record without it")
    erase.add_argument("--subject", required=True,
                       help="the subject's identifier, as its subject columns hold it")
    erase.add_argument("--no-run", action="store_true",
                       help="erase only: leave the recomputation to the next pipeline run")
    source_dsn(erase)
    erase.set_defaults(func=lambda args: cmd_erase(args, emit))


def cmd_erase(args: argparse.Namespace, emit: Emit) -> None:
    pipeline = resolve(args.pipeline)
    the_lake = lake(args)
    done = erase_subject(the_lake, pipeline, args.subject, now=now())
    data: dict[str, Any] = {
        "erasure_id": done.id, "subject_hash": done.subject_hash, "rows": done.rows,
        "tables": [t.__dict__ for t in done.tables], "landing": [f.__dict__ for f in done.landing],
        "rebuilt": list(done.rebuilt), "kept": [{"consumer": c, "why": w} for c, w in done.kept],
        "purged_files": done.purged}
    lines = [f"erasure {done.id}: {done.rows:,} rows from {len(done.tables)} tables, "
             f"{sum(f.lines for f in done.landing):,} lines from {len(done.landing)} landing "
             f"files; {done.purged} files purged from storage"]
    lines += [f"  {t.path}: {t.rows:,} rows (version {t.version_before} -> {t.version_after})"
              for t in done.tables]
    lines += [f"  rebuilt from the log: {c}" for c in done.rebuilt]
    lines += [f"  kept {c}: {why}" for c, why in done.kept]
    if not args.no_run:
        from lakelog.cli.runs import succeeded, dagster_quiet, open_runner

        with dagster_quiet():
            runner, _ = open_runner(args, pipeline, source_dsn=args.source_dsn)
            report = succeeded(runner.catch_up())
        data["run_id"] = report.run_id
        lines.append(f"recomputed by run {report.run_id} ({report.seconds:.1f} s)")
        left = find_subject(the_lake, pipeline.subject_columns, args.subject)
        data["remaining"] = left
        if left:
            emit(args, data, "\n".join(lines))
            raise LakelogError(f"erasure {done.id}: the subject is still in "
                               f"{', '.join(f'{p} ({n} rows)' for p, n in left.items())}: new "
                               "records of it arrived, or a source still holds it; erase again")
        lines.append("verified: no table holds the subject")
    emit(args, data, "\n".join(lines))
