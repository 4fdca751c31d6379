"""The erasure record (``_erasures``): what each erasure did, without the personal data.

Rows per erasure, each appended as it happens: ``started`` (its decisions), then one per
thing it changed — a table (rows removed, files rewritten, the versions before and after), a
consumer rebuilt from the log or kept (and why), a landing file (lines removed) — and ``done``.
Each row carries the erasure's id, the subject's salted hash (`subject.subject_hash`) and the
salt. Whoever knows the subject can prove it was erased; `find_subject` and
`find_erased` look for it again.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.erasure.subject import hash_column, subject_fields, subject_hash
from lakelog.erasure.tables import RECORD, subject_condition, subject_tables
from lakelog.lake import Lake

if TYPE_CHECKING:
    from lakelog.erasure.erase import Erasure
    from lakelog.erasure.landing import FileErasure
    from lakelog.erasure.tables import TableErasure

PATH = RECORD

SCHEMA = T.StructType([
    T.StructField("erasure_id", T.StringType()),
    T.StructField("subject_hash", T.StringType()),
    T.StructField("salt", T.StringType()),
    T.StructField("erased_at", T.TimestampType()),
    T.StructField("kind", T.StringType()),  # started|table|rebuilt|kept|landing|done
    T.StructField("target", T.StringType()),  # a table or file path, a consumer
    T.StructField("rows", T.LongType()),  # rows (lines) removed
    T.StructField("files", T.LongType()),
    T.StructField("version_before", T.LongType()),
    T.StructField("version_after", T.LongType()),
    T.StructField("detail", T.StringType()),
])


@dataclass(frozen=True)
class Started:
    """An erasure as its first row records it: who (hashed) and what it decided."""

    erasure_id: str
    subject_hash: str
    salt: str
    rebuild: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Recorded:
    erasure_id: str
    subject_hash: str
    salt: str
    erased_at: datetime


def _rows(lake: Lake) -> list[dict[str, Any]]:
    return lake.read_arrow(lake.snapshot(PATH)).to_pylist() if lake.exists(PATH) else []


def start(lake: Lake, rebuild: list[str], kept: list[tuple[str, str]], *, subject: str,
          now: datetime) -> Started:
    """Record a new erasure of `subject` and its decisions, before it changes anything."""
    salt = secrets.token_hex(16)
    started = Started(secrets.token_hex(8), subject_hash(subject, salt), salt, tuple(rebuild),
                      tuple((c, w) for c, w in kept))
    Log(lake, started, now=now).append([{
        "kind": "started", "target": "",
        "detail": json.dumps({"rebuild": list(rebuild), "kept": [list(k) for k in kept]})}])
    return started


def unfinished(lake: Lake, subject: str) -> Started | None:
    """The erasure of `subject` that started and did not finish (a crash), if any."""
    rows = _rows(lake)
    done = {r["erasure_id"] for r in rows if r["kind"] == "done"}
    for r in rows:
        if (r["kind"] == "started" and r["erasure_id"] not in done
                and subject_hash(subject, r["salt"]) == r["subject_hash"]):
            plan = json.loads(r["detail"])
            return Started(r["erasure_id"], r["subject_hash"], r["salt"],
                           tuple(plan["rebuild"]), tuple(tuple(k) for k in plan["kept"]))
    return None


class Log:
    """Appends an erasure's rows to the record as it goes."""

    def __init__(self, lake: Lake, started: Started, *, now: datetime) -> None:
        self.lake, self.now = lake, now
        self.base = {"erasure_id": started.erasure_id, "subject_hash": started.subject_hash,
                     "salt": started.salt, "erased_at": now, "rows": 0, "files": 0,
                     "version_before": None, "version_after": None, "detail": None}

    def append(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self.lake.create_table(PATH, SCHEMA)
            self.lake.write_rows(self.lake.snapshot(PATH), [{**self.base, **r} for r in rows])

    def table(self, t: "TableErasure") -> None:
        self.append([{"kind": "table", "target": t.path, "rows": t.rows, "files": t.files,
                      "version_before": t.version_before, "version_after": t.version_after}])

    def consumers(self, rebuilt: Sequence[str], kept: Sequence[tuple[str, str]]) -> None:
        self.append([{"kind": "rebuilt", "target": c, "detail": "outputs emptied, recomputed "
                      "from the log by its next batches"} for c in rebuilt]
                    + [{"kind": "kept", "target": c, "detail": why} for c, why in kept])

    def landing(self, files: Sequence["FileErasure"]) -> None:
        self.append([{"kind": "landing", "target": f.path, "rows": f.lines, "files": 1,
                      "detail": f"{f.size_before} -> {f.size_after} bytes"} for f in files])

    def done(self, erasure: "Erasure") -> None:
        self.append([{"kind": "done", "target": "", "rows": erasure.rows,
                      "files": erasure.purged, "detail": "files purged from storage"}])


def tables_of(lake: Lake, erasure_id: str) -> dict[str, int]:
    """The tables erasure `erasure_id` has rewritten so far, with the version it left each at."""
    return {r["target"]: r["version_after"] for r in _rows(lake)
            if r["erasure_id"] == erasure_id and r["kind"] == "table"}


def recorded(lake: Lake) -> list[Recorded]:
    """Every completed erasure in the record, oldest first."""
    return sorted((Recorded(r["erasure_id"], r["subject_hash"], r["salt"], r["erased_at"])
                   for r in _rows(lake) if r["kind"] == "done"), key=lambda r: r.erased_at)


def find_subject(lake: Lake, names: Collection[str], subject: str) -> dict[str, int]:
    """Rows of `subject` per table under the root, where there are any (one job a table)."""
    found = {}
    for path in subject_tables(lake, names):
        snapshot = lake.snapshot(path)
        rows = lake.read(snapshot, all_versions=True)
        condition = subject_condition(path, snapshot.schema, names, subject)
        count = rows.where(condition).count()
        if count:
            found[path] = count
    return found


def find_erased(lake: Lake, names: Collection[str]) -> dict[str, list[str]]:
    """Tables holding a value of a subject column that hashes to an erased subject, with the
    erasure ids found: the check that needs no subject. Each table is scanned once for all
    erasures (distinct subject values, hashed with every erasure's salt)."""
    erasures = recorded(lake)
    if not erasures:
        return {}
    found: dict[str, list[str]] = {}
    for path in subject_tables(lake, names):
        snapshot = lake.snapshot(path)
        fields = subject_fields(snapshot.schema, names)
        if not fields:  # the dead letters: raw text, searched by value only
            continue
        rows = lake.read(snapshot, all_versions=True)
        values = rows.select(F.explode(F.array(*[F.col(c).cast("string") for c in fields]))
                             .alias("v")).where(F.col("v").isNotNull()).distinct()
        hits = values.select(*[
            F.max((hash_column(F.col("v"), e.salt) == e.subject_hash).cast("int"))
            .alias(f"e{i}") for i, e in enumerate(erasures)]).first()
        ids = [e.erasure_id for i, e in enumerate(erasures) if hits and hits[f"e{i}"]]
        if ids:
            found[path] = ids
    return found
