"""One table's rows of a data subject, removed by rewriting the files that hold them.

`erase_rows` finds the files holding rows that match (one Spark job: rows per file), writes the
files' other rows again and removes the old files in one Delta commit — copy-on-write, as a
Delta ``DELETE`` does. Every other row keeps its values, so a log's offsets do not move, and a
log's heads are kept first (`lakelog.log.offsets.keep_heads`): removing a head's record never
hands its offset out again. A merge-on-read table loses every version of the subject's rows. The commit is made relative to
the snapshot read: a writer that changed the same files first makes it fail cleanly
(`ConcurrentWriteError`) and it is planned again; a writer that appended rows of the subject
meanwhile is caught by the next pass, which reads only the files not checked yet and runs
until one finds nothing (with no such file, it needs no Spark job).

`Lake.purge_removed` then deletes the removed files from storage, so no earlier version of the
table — time travel — reads the rows again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from urllib.parse import unquote

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.erasure.subject import subject_fields, subject_filter, text_filter
from lakelog.errors import ConcurrentWriteError, LakelogError
from lakelog.lake import Lake, Snapshot
from lakelog.lake.merge_on_read import FILE
from lakelog.log import dead_letters
from lakelog.log.offsets import head_floors, keep_heads, partition_states

METADATA_KEY = "lakelog.erasure"
#: The erasure record, which holds no subject (`lakelog.erasure.record`).
RECORD = "_erasures"
PASSES = 5


class ErasureError(LakelogError):
    """An erasure could not finish (its progress so far is kept; running it again resumes)."""


@dataclass(frozen=True)
class TableErasure:
    """What erasing one subject did to one table."""

    path: str
    rows: int  # rows removed
    files: int  # data files rewritten
    version_before: int
    version_after: int  # equal to version_before when nothing was removed


def erase_rows(lake: Lake, path: str, names: Collection[str], subject: str, *,
               erasure_id: str) -> TableErasure:
    """Remove the rows of `path` that are `subject`'s (module docstring)."""
    first = lake.snapshot(path).version
    rows = files = 0
    checked: set[str] = set()  # files known to hold none of the subject's rows
    for _ in range(PASSES):
        snapshot = lake.snapshot(path)
        unchecked = [f for f in snapshot.files() if f.path not in checked]
        if not unchecked:
            return TableErasure(path, rows, files, first, snapshot.version)
        condition = subject_condition(path, snapshot.schema, names, subject)
        assert condition is not None, f"{path} holds no subject column"
        counts = (lake.read(snapshot, files=unchecked, file_paths=True).where(condition)
                  .groupBy(F.col(FILE).alias("file")).count().collect())
        hit = {r["file"]: r["count"] for r in counts}
        # Spark's file URIs are percent-encoded; the files' paths are as on disk.
        found = [unquote(name) for name in hit]
        chosen = [f for f in unchecked if any(name.endswith("/" + f.path) for name in found)]
        if not chosen:
            return TableErasure(path, rows, files, first, snapshot.version)
        if _is_log(snapshot) and head_floors(snapshot) != _heads(snapshot):
            keep_heads(lake, path)
            snapshot = lake.snapshot(path)
        kept = lake.read(snapshot, files=chosen, all_versions=True).where(~condition)
        try:
            version = lake.write(snapshot, kept, remove=chosen, metadata={
                METADATA_KEY: {"id": erasure_id, "rows": sum(hit.values())}})
        except ConcurrentWriteError:
            checked = set()  # another writer changed the table first: plan again
            continue
        rows += sum(hit.values())
        files += len(chosen)
        # Checked now: the snapshot's other files and the commit's own; a writer's files
        # committed meanwhile are checked by the next pass.
        previous = {f.path for f in lake.snapshot(path, version - 1).files()}
        checked = ({f.path for f in snapshot.files()}
                   | {f.path for f in lake.snapshot(path, version).files()} - previous)
    raise ErasureError(f"{path}: rows of the subject remained after {PASSES} passes (writers "
                       "kept adding or rewriting them); pause the pipeline and erase again")


def _is_log(snapshot: Snapshot) -> bool:
    return snapshot.partition_columns == ["partition"] and "offset" in snapshot.schema.names


def _heads(snapshot: Snapshot) -> dict[int, int]:
    return {p: s.head for p, s in partition_states(snapshot, 0).items()}


def subject_condition(path: str, schema: T.StructType, names: Collection[str], subject: str
                      ) -> Column | None:
    """True for the rows of table `path` that are `subject`'s: a subject column (`names`) equal
    to it, or a dead letter's raw text mentioning it (None: the table holds no subject)."""
    if path == RECORD:
        return None
    if path == dead_letters.PATH:
        return text_filter("raw", subject)
    return subject_filter(schema, names, subject)


def subject_tables(lake: Lake, names: Collection[str]) -> list[str]:
    """Every table under the root that can hold a subject's rows: derived tables first, then
    the log, so that a change event published from a table's erasure in a race is erased from
    its topic afterwards."""
    return [path for path in sorted(lake.tables(), key=lambda p: (p.startswith("log/"), p))
            if path == dead_letters.PATH
            or (path != RECORD and subject_fields(lake.snapshot(path).schema, names))]
