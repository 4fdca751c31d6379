"""Right to erasure: one data subject removed from everything lakelog holds (DDIA ch. 11,
"Limitations of immutability").

A log is immutable by design, yet a person may ask for their data to be deleted. `erase_subject`
does it in this order. A crash anywhere leaves the erasure unfinished in the record; erasing the
same subject again resumes it (same id, same decisions) and each step finds less to do:

1. refuse while a consumer it may rebuild has a microbatch in progress (it must finish first);
   decide which consumers step 3 rebuilds — before anything is erased, so that a resumed
   erasure decides the same — and record the erasure as started;
2. rewrite every Delta table under the lake root that holds the subject's rows
   (`lakelog.erasure.tables.erase_rows`): derived tables — compacted and history tables,
   streams, state, views, replays — then the log: topics and dead letters (their raw text).
   Other rows, and so other records' offsets, are unchanged. A change-streamed table is
   published up to date just before, and its erasure commit marked published without being
   published: its deletes would carry the subject's rows to the topic again;
3. rebuild from the log each consumer that read the subject's records and keeps an output
   without a subject column (totals, windows): those rows still count the subject
   (`lakelog.consumers.resets.rebuild_consumer`; its next batches recompute them without the
   subject). A consumer whose topics retention has already cut cannot be recomputed (the log
   no longer holds what it counted) and one whose decisions were published elsewhere must not
   be: those are recorded as kept, with the reason; their rows of the subject went in step 2;
4. delete from storage every file those tables' commits removed up to the erasure's last
   commit to each (`Lake.purge_removed`), and their Delta log before it (`Lake.forget_history`:
   its file statistics hold column minima and maxima): no earlier version can be read again by
   time travel, while what writers committed since stays readable, change feed and all;
5. rewrite the landing files holding the subject's lines (`lakelog.erasure.landing`);
6. mark the erasure done in its record (`lakelog.erasure.record`), which says what was done
   without the subject: a row when it starts (with step 3's decisions, made before anything is
   erased), one per table, landing file and consumer as each is done.

SQL models recompute from their inputs' changes at their next run (a model whose inputs'
history was purged is rebuilt in full), as do the rebuilt consumers; `find_subject` then finds
nothing. Run it while the pipeline is quiet if you can: a writer racing a rewrite makes that
table's pass run again, never lose or double a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lakelog.cdc.change_streams import ChangeStream, publish_changes
from lakelog.consumers import units
from lakelog.consumers.resets import rebuild_consumer
from lakelog.errors import ConfigError, ConsumerBusyError
from lakelog.erasure import landing, record
from lakelog.erasure.subject import subject_fields, subject_filter
from lakelog.erasure.tables import METADATA_KEY, TableErasure, erase_rows, subject_tables
from lakelog.lake import AppTxn, Lake
from lakelog.log.offsets import partition_states
from lakelog.pipeline import Pipeline


@dataclass(frozen=True)
class Erasure:
    """What one erasure did; its record holds the same without the subject."""

    id: str
    subject_hash: str
    salt: str
    tables: tuple[TableErasure, ...]  # the tables that held the subject
    landing: tuple[landing.FileErasure, ...]
    rebuilt: tuple[str, ...]  # consumers whose outputs are recomputed from the log
    kept: tuple[tuple[str, str], ...]  # (consumer, why its aggregates were not recomputed)
    purged: int  # files deleted from storage

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)


def check_subject(subject: str) -> str:
    subject = subject.strip() if isinstance(subject, str) else subject
    if not isinstance(subject, str) or not subject:
        raise ConfigError("erasure: the subject must be a non-empty identifier (a user id, a key)")
    return subject


def erase_subject(
    lake: Lake, pipeline: Pipeline, subject: str, *, now: datetime
) -> Erasure:
    """Remove `subject` from everything lakelog holds (module docstring: the steps). An erasure
    of the same subject that crashed is resumed: its id, salt and decisions are reused."""
    subject = check_subject(subject)
    names = pipeline.subject_columns
    if not names:
        raise ConfigError(f"pipeline {pipeline.name} declares no subject_columns, so no table "
                          "says whose data a row is; declare them (e.g. ('user_id',))")
    candidates = _rebuild_candidates(pipeline)
    busy = [c for c in candidates
            if units.load_all(lake, pipeline.consumer(c), pipeline.all_topics).plan is not None]
    if busy:  # step 1
        raise ConsumerBusyError(f"consumer(s) {', '.join(busy)} have a microbatch in progress; "
                                "let them finish (or rerun them if they crashed), then erase")
    started = record.unfinished(lake, subject)
    if started is None:
        rebuild, kept = _decide(lake, pipeline, candidates, subject)
        started = record.start(lake, rebuild, kept, subject=subject, now=now)
    log = record.Log(lake, started, now=now)
    streams = {s.path: s for s in pipeline.published_streams}
    erased = []
    for path in subject_tables(lake, names):  # step 2
        if path in streams:
            publish_changes(lake, streams[path], now=now)
        done = erase_rows(lake, path, names, subject, erasure_id=started.erasure_id)
        if done.rows:
            erased.append(done)
            log.table(done)
            if path in streams:
                _skip_publication(lake, streams[path], done, now=now)
    # Per table, the version up to which its history goes: the erasure's own commits, not
    # what a writer committed since (a change stream or model may still read those).
    touched = record.tables_of(lake, started.erasure_id) | {t.path: t.version_after
                                                            for t in erased}
    for name in started.rebuild:  # step 3
        for path in rebuild_consumer(lake, pipeline, name, to="earliest", now=now).emptied:
            touched[path] = lake.snapshot(path).version
    log.consumers(started.rebuild, started.kept)
    purged = 0
    for path, version in sorted(touched.items()):  # step 4
        purged += len(lake.purge_removed(path, through=version))
        lake.forget_history(path, before=version)
    files = landing.erase_landing(lake, pipeline, subject, now=now)  # step 5
    log.landing(files)
    done = Erasure(started.erasure_id, started.subject_hash, started.salt, tuple(erased),
                   tuple(files), started.rebuild, started.kept, purged)
    log.done(done)  # step 6
    return done


def _decide(lake: Lake, pipeline: Pipeline, candidates: list[str], subject: str
            ) -> tuple[list[str], list[tuple[str, str]]]:
    """Which consumers to rebuild and which to keep (with why): those reading a topic that
    holds the subject's records, decided before anything is erased and kept in the record,
    so a resumed erasure decides the same."""
    holding = set()
    for name, topic in pipeline.all_topics.items():
        if lake.exists(topic.path) and subject_fields(topic.schema, pipeline.subject_columns):
            records = lake.read(lake.snapshot(topic.path))
            condition = subject_filter(topic.schema, pipeline.subject_columns, subject)
            if not records.where(condition).isEmpty():
                holding.add(name)
    cut = _cut_topics(lake, pipeline)
    rebuild, kept = [], []
    for name in candidates:
        if holding.intersection(pipeline.consumer(name).topics):
            why = _not_rebuildable(pipeline, name, cut)
            if why:
                kept.append((name, why))
            else:
                rebuild.append(name)
    return rebuild, kept


def _rebuild_candidates(pipeline: Pipeline) -> list[str]:
    """Consumers of topics with a subject column that keep an output without one."""
    names = pipeline.subject_columns
    captured = {c for s in pipeline.sources for c in s.consumers}
    found = []
    for name, consumer in pipeline.all_consumers.items():
        if name in captured:
            continue  # a captured table's rows are the source's rows: erased as rows
        reads_subject = any(subject_fields(pipeline.topic(t).schema, names)
                            for t in consumer.topics)
        anonymous = any(not subject_fields(o.schema, names) for o in consumer.outputs)
        if reads_subject and anonymous:
            found.append(name)
    return found


def _cut_topics(lake: Lake, pipeline: Pipeline) -> dict[str, int]:
    """Topics whose log no longer starts at offset 0 (retention or compaction removed records),
    with their first retained offset's partition start."""
    cut = {}
    for name, topic in pipeline.all_topics.items():
        if lake.exists(topic.path):
            states = partition_states(lake.snapshot(topic.path), topic.partitions)
            starts = [s.start_offset for s in states.values() if s.start_offset]
            if starts:
                cut[name] = min(starts)
    return cut


def _not_rebuildable(pipeline: Pipeline, name: str, cut: dict[str, int]) -> str | None:
    hazards = pipeline.rebuild_hazards(name)
    if hazards:
        return "; ".join(hazards)
    gone = [t for t in pipeline.consumer(name).topics if t in cut]
    if gone:
        return (f"retention has removed the oldest records of {', '.join(gone)}, so the log no "
                "longer holds everything its aggregates count")
    return None


def _skip_publication(
    lake: Lake, stream: ChangeStream, done: TableErasure, *, now: datetime
) -> None:
    """Record the erasure's commits to a change-streamed table as published, with no events.
    If another writer committed to the table in between, its changes must be published: then
    the erasure's deletes are published with them, and erased from the topic by step 2's pass
    over the log, which comes after the tables."""
    topic = lake.snapshot(stream.topic.path) if lake.exists(stream.topic.path) else None
    published = None if topic is None else topic.txn_version(stream.app_id)
    if published is None:
        return  # never published: its first publication is a snapshot of the erased table
    if published == done.version_before and done.version_after == done.version_before + 1:
        lake.write(topic, None, txns=[AppTxn(stream.app_id, done.version_after)],
                   metadata={METADATA_KEY: {"table": stream.path}})
    else:
        publish_changes(lake, stream, now=now)
