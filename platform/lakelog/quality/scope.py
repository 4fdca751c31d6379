"""How much of a topic a check must validate: the rows appended since a version that passed.

A topic only grows at its heads, so once the suite passed at version V, the rows it still has to
see are those of the files added since: validating the whole log every run would cost more with
every hour of history. The rows already checked are summed up by their heads at V, which the
suite's contiguity rule continues from (`topic_suite(checked=...)`): the first new offset of
each log partition must follow the last one checked. Anything else — no version that passed,
one the log no longer has, a schema changed since, a compacted topic (compaction rewrites old
offsets into new files) — is validated whole. So is a topic after an erasure, which forgets
the versions before it (`lakelog.erasure`); a topic that had records erased has gaps, which
its suite then allows.

Rows of a few files (`SMALL_BYTES` in all, as a check of the rows added since it passed
typically validates) are validated uncached: Spark reads them again for each job faster than it
caches them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from lakelog.lake import DataFile, Lake, Snapshot
from lakelog.log.offsets import HEAD_FLOORS, partition_states
from lakelog.log.topics import Topic

if TYPE_CHECKING:  # suites are Great Expectations' expectations: imported when there are rows
    from lakelog.quality.suites import Suite


#: Files of at most this many bytes in all are read again by each validation job, not cached.
SMALL_BYTES = 32 << 20


@dataclass(frozen=True)
class Scope:
    """The rows to validate (None: none were added since the version that passed), the suite
    (None with no rows: not built, nor Great Expectations imported), what they are, for the
    check's description, and whether they are few enough to go uncached
    (`validate(cache=not small)`)."""

    rows: DataFrame | None
    suite: Suite | None
    description: str
    small: bool = False


def read_scope(lake: Lake, snapshot: Snapshot, suite: Suite, description: str,
               files: list[DataFile] | None = None) -> Scope:
    """The scope of `files` of `snapshot` (default: all of them)."""
    chosen = snapshot.files() if files is None else files
    return Scope(lake.read(snapshot, files=files), suite, description,
                 small=sum(f.size for f in chosen) <= SMALL_BYTES)


def topic_scope(lake: Lake, topic: Topic, snapshot: Snapshot, *, passed: int | None) -> Scope:
    """What of `topic` at `snapshot` to validate, given the last version that passed."""
    erased = HEAD_FLOORS in snapshot.properties

    def whole() -> Scope:  # read only when chosen: classic Spark resolves every file at once
        from lakelog.quality.suites import topic_suite

        return read_scope(lake, snapshot, topic_suite(topic, erased=erased), "the whole table")

    if passed is None or passed > snapshot.version or topic.compaction is not None:
        return whole()
    try:
        before = lake.snapshot(snapshot.path, passed)
    except Exception:  # noqa: BLE001 - a version the log no longer has: validate it all
        return whole()
    if before.table_id != snapshot.table_id or before.schema != snapshot.schema:
        return whole()
    known = {f.path for f in before.files()}
    added = [f for f in snapshot.files() if f.path not in known]
    since = f"rows added since version {passed}, which passed"
    if not added:
        return Scope(None, None, f"no {since}")
    from lakelog.quality.suites import topic_suite

    heads = {p: s.head for p, s in partition_states(before, topic.partitions).items()}
    suite = topic_suite(topic, checked=heads, erased=erased)
    return read_scope(lake, snapshot, suite, since, added)
