"""The landing zone and its manifest: which files were ingested, and the plan of the next ingest.

NDJSON files dropped under ``landing/<topic>/`` are ingested once each. A file is known by its
path and size: a re-scanned or re-dropped identical file is skipped; a file that grew is taken
again (its already-appended records are then caught as duplicates by event id). Hidden files and
files under hidden folders (``.name``, ``_name``) are in-flight uploads and are not picked up.

The manifest ``_checkpoints/_ingest/<topic>`` is a small Delta table rewritten by each commit,
guarded like consumer checkpoints so that two concurrent ingests of a topic cannot both plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import types as T

from lakelog.lake import Lake, Snapshot
from lakelog.lake.guarded_rewrite import guarded_rewrite

SUFFIXES = (".ndjson", ".jsonl", ".json")

SCHEMA = T.StructType(
    [
        T.StructField("file", T.StringType()),
        T.StructField("size", T.LongType()),
        T.StructField("batch", T.LongType()),
        T.StructField("done", T.BooleanType()),
        T.StructField("updated_at", T.TimestampType()),
    ]
)


def landing_path(topic: str) -> str:
    return f"landing/{topic}"


@dataclass(frozen=True)
class IngestPlan:
    batch: int
    files: tuple[tuple[str, int], ...]  # (path relative to the lake root, size)


@dataclass(frozen=True)
class Manifest:
    topic: str
    snapshot: Snapshot | None  # None: nothing was ever ingested
    batch: int  # the last completed ingest batch; -1 before the first
    ingested: Mapping[tuple[str, int], int]  # (file, size) -> the batch that ingested it
    plan: IngestPlan | None


def manifest_path(topic: str) -> str:
    return f"_checkpoints/_ingest/{topic}"


def load_manifest(lake: Lake, topic: str) -> Manifest:
    """The topic's manifest; reading it never writes."""
    path = manifest_path(topic)
    if not lake.exists(path):
        return Manifest(topic, None, -1, {}, None)
    snapshot = lake.snapshot(path)
    rows = lake.read_arrow(snapshot).to_pylist()
    done = [r for r in rows if r["done"]]
    planned = [r for r in rows if not r["done"]]
    batch = max((r["batch"] for r in done), default=-1)
    plan = None
    if planned:
        plan = IngestPlan(planned[0]["batch"], tuple(sorted((r["file"], r["size"]) for r in planned)))
    return Manifest(topic, snapshot, batch, {(r["file"], r["size"]): r["batch"] for r in done}, plan)


def pending_files(lake: Lake, manifest: Manifest) -> list[tuple[str, int]]:
    """Landing files of the topic not yet ingested (nor planned), oldest name first."""
    base = landing_path(manifest.topic)
    planned = set(manifest.plan.files) if manifest.plan else set()
    found = []
    for relative, size in lake.list_files(base):
        item = (f"{base}/{relative}", size)
        if relative.endswith(SUFFIXES) and item not in manifest.ingested and item not in planned:
            found.append(item)
    return found


def _save(
    lake: Lake, manifest: Manifest, ingested: Mapping[tuple[str, int], int],
    plan: IngestPlan | None, now: datetime,
) -> int:
    """Replace the manifest by these files and plan; the table's new version."""
    rows = [
        {"file": f, "size": s, "batch": b, "done": True, "updated_at": now}
        for (f, s), b in sorted(ingested.items())
    ]
    if plan:
        rows += [
            {"file": f, "size": s, "batch": plan.batch, "done": False, "updated_at": now}
            for f, s in plan.files
        ]
    return guarded_rewrite(lake, manifest_path(manifest.topic), SCHEMA, manifest.snapshot, rows,
                           guard=f"lakelog.landing:{manifest.topic}")


def save_plan(lake: Lake, manifest: Manifest, plan: IngestPlan, *, now: datetime) -> Manifest:
    """Step 1 of an ingest: the manifest with the plan, on the table's new version, which
    step 4 (`save_done`) commits against."""
    version = _save(lake, manifest, manifest.ingested, plan, now)
    return Manifest(manifest.topic, lake.snapshot(manifest_path(manifest.topic), version),
                    manifest.batch, dict(manifest.ingested), plan)


def save_done(lake: Lake, manifest: Manifest, plan: IngestPlan, *, now: datetime) -> int:
    """Mark the plan's files ingested. Entries of files gone from the landing zone are dropped.
    The table's new version (`load_manifest` reads the manifest: nothing after an ingest needs
    its snapshot, a Delta table load of its own)."""
    present = {
        (f"{landing_path(manifest.topic)}/{rel}", size)
        for rel, size in lake.list_files(landing_path(manifest.topic))
    }
    ingested = {item: b for item, b in manifest.ingested.items() if item in present}
    ingested.update(dict.fromkeys(plan.files, plan.batch))
    return _save(lake, manifest, ingested, None, now)


def save_resized(
    lake: Lake, manifest: Manifest, sizes: Mapping[str, tuple[int, int]], *, now: datetime
) -> int:
    """Keep the manifest true to landing files rewritten smaller (``file -> (old, new)`` size):
    an ingested or planned file is known by its new size too, so it is not taken again. The
    old entries stay until `save_done` drops them as gone, so a crash before the file is
    rewritten leaves it known as well. The table's new version."""
    ingested = dict(manifest.ingested)
    for (file, size), batch in manifest.ingested.items():
        if file in sizes and sizes[file][0] == size:
            ingested[(file, sizes[file][1])] = batch
    plan = manifest.plan
    if plan is not None:
        plan = IngestPlan(plan.batch, tuple(sorted(
            (f, sizes[f][1]) if f in sizes and sizes[f][0] == s else (f, s) for f, s in plan.files)))
    return _save(lake, manifest, ingested, plan, now)
