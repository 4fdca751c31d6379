"""One table's rows of a data subject, removed by rewriting the files that hold them.

`erase_rows` finds the files holding rows that match (one Spark job: rows per file), writes the
files' other rows again and removes the old files in one Delta commit — copy-on-write, as a
Delta ``DELETE`` does. Every other row keeps its values, so a log's offsets do not move, and a
log's heads are kept first (`lakelog.log.offsets.keep_heads`): removing a head's record never
hands its offset out again. A merge-on-read table loses every version of the subject's rows. The commit is made relative to
the snapshot read: a writer that changed the same files first makes it fail cleanly
(`ConcurrentWriteError`) and it is planned again; a writer that appended rows of the subject
meanwhile is caught by the next pass, which runs until one finds nothing.

`Lake.purge_removed` then deletes the removed files from storage, so no earlier version of the
table — time travel — reads the rows again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

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
    for _ in range(PASSES):
        snapshot = lake.snapshot(path)
        everything = lake.read(snapshot, file_paths=True)
        condition = subject_condition(path, snapshot.schema, names, subject)
        assert condition is not None, f"{path} holds no subject column"
        counts = everything.where(condition).groupBy(F.col(FILE).alias("file")).count().collect()
        if not counts:
            return TableErasure(path, rows, files, first, snapshot.version)
        if _is_log(snapshot) and head_floors(snapshot) != _heads(snapshot):
            keep_heads(lake, path)  # a new version: plan again on it
            continue
        hit = {r["file"]: r["count"] for r in counts}
        chosen = [f for f in snapshot.files()
                  if any(name.endswith("/" + f.path) for name in hit)]
        kept = lake.read(snapshot, files=chosen, all_versions=True).where(~condition)
        try:
            lake.write(snapshot, kept, remove=chosen, metadata={
                METADATA_KEY: {"id": erasure_id, "rows": sum(hit.values())}})
        except ConcurrentWriteError:
            continue  # another writer changed these files first: plan again
        rows += sum(hit.values())
        files += len(chosen)
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
