"""Ingesting NDJSON records into a topic: validate, dead-letter, de-duplicate, append.

Landing-zone ingestion is exactly-once per file, in the same steps as a consumer microbatch:

1. **plan** — list new landing files and commit them to the manifest as the next batch
   (a pending plan is a retry and is reused unchanged);
2. **dead letters** — commit the batch's bad records, if any, to ``log/_dead_letters`` with
   the application transaction ``(lakelog.ingest:<topic>, batch)``, skipped if already there;
3. **append** — commit the good, new records to the topic with the same transaction, also
   skipped if already there; the commit metadata holds the batch's counts;
4. **done** — mark the files ingested in the manifest.

Per batch: records read = appended + duplicates + dead letters. A batch small enough to hold is
parsed by one Spark job and finished in this process (`lakelog.log.held_batch`); a larger one
goes through Spark throughout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.lake import AppTxn, CommitMetadata, Lake, Snapshot, driver_write
from lakelog.log import dead_letters, held_batch, landing
from lakelog.log.offsets import AppendResult, append, partition_of
from lakelog.log.records import INGEST_TIME, event_time, parse_lines, to_envelope
from lakelog.log.topics import Topic
from lakelog.spark import literals

ORDER = ("_src_file", "_src_line")
#: The type of a record's position (`ORDER` as a struct).
POSITION_TYPE = "struct<_src_file:string,_src_line:bigint>"
METADATA_KEY = "lakelog.ingest"


@dataclass(frozen=True)
class IngestResult:
    topic: str
    batch: int | None
    files: tuple[str, ...]
    read: int = 0
    appended: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    version: int | None = None
    ranges: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    resumed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "batch": self.batch,
            "files": list(self.files),
            "read": self.read,
            "appended": self.appended,
            "duplicates": self.duplicates,
            "dead_letters": self.dead_letters,
            "version": self.version,
            "ranges": {str(p): list(r) for p, r in self.ranges.items()},
            "resumed": self.resumed,
        }


def _decoded_path(uri):
    """Spark's percent-encoded file URI as a plain path (``file:/a%20b`` → ``/a b``)."""
    plain = F.url_decode(F.regexp_replace(uri, "\\+", "%2B"))
    return F.regexp_replace(plain, "^file:/+", "/")


#: The columns of a batch's lines: where each came from (`ORDER`), and the line.
LINE_COLUMNS = (*ORDER, "value")
# Schemas of small local frames as types, not DDL text: Spark Connect parses DDL on the server.
LINES_SCHEMA = T.StructType([T.StructField("_src_file", T.StringType()),
                             T.StructField("_src_line", T.LongType()),
                             T.StructField("value", T.StringType())])


def read_landing_lines(spark: SparkSession, lake: Lake, files: Sequence[str]) -> DataFrame:
    """Every line of `files` (lake-relative paths) with its file and 1-based line number."""
    whole = spark.read.text([lake.spark_path(f) for f in files], wholetext=True)
    # The lake-relative path from the file's own: the lake's root is a constant of the plan
    # (not a join with the batch's file list, which cost a broadcast job per batch).
    root = lake.spark_path("")
    path = _decoded_path(F.col("_metadata.file_path"))
    relative = F.when(path.startswith(root), F.substring(path, len(root) + 1, 1 << 30)).otherwise(
        F.raise_error(F.concat(F.lit(f"a landing file outside the lake root {root}: "), path)))
    # The path once per file, before the lines are cut out: selected beside them, Spark
    # decoded it again for every line (twice, in the check and the result).
    per_file = whole.select(relative.alias("_src_file"), "value")
    lines = per_file.select("_src_file",
                            F.posexplode(F.split("value", "\n")).alias("_pos", "value"))
    value = F.col("value")  # without a trailing CR: a test of the last byte, not a regex
    return lines.select(
        "_src_file",
        (F.col("_pos") + 1).cast("long").alias("_src_line"),
        F.when(value.endswith("\r"), value.substr(F.lit(1), F.length(value) - 1))
        .otherwise(value).alias("value"),
    )


def lines_frame(spark: SparkSession, lines: Sequence[str], *, source: str) -> DataFrame:
    """In-memory lines (``lakelog produce``) in the shape of `read_landing_lines`."""
    return spark.createDataFrame(
        [(source, i + 1, line.rstrip("\r\n")) for i, line in enumerate(lines)],
        LINES_SCHEMA,
    )


HEADERS_TYPE = T.MapType(T.StringType(), T.StringType())


def _with_headers(lines: DataFrame) -> DataFrame:
    """A record's headers: the file and line it came from (`held_batch.with_headers` too)."""
    return lines.withColumn(
        "headers",
        F.create_map(
            F.lit("source"), F.col("_src_file"), F.lit("line"), F.col("_src_line").cast("string")
        ),
    )


def _duplicates(
    lake: Lake, topic: Topic, good: DataFrame, snapshot: Snapshot, bounds: tuple | None
) -> DataFrame:
    """Positions (file, line) of `good` records that are duplicates: the event id came earlier in
    the batch, or is already in the log.

    The log is searched for the batch's event ids only within the topic's dedup window around
    the batch's event times, so the cost follows the batch, not the log's history. Only the
    narrow (event id, file, line) projection is shuffled, once.
    """
    ids = good.select("event_id", F.struct(*ORDER).alias("_at"))
    if bounds is not None:
        lo, hi = bounds[0] - topic.dedup_window, bounds[1] + topic.dedup_window
        files = [f for f in snapshot.files() if f.overlaps("event_time", lo, hi)]
        if files:
            seen = (
                lake.read(snapshot, files=files)
                .where(F.col("event_time").between(lo, hi))
                .select("event_id", F.lit(None).cast(POSITION_TYPE).alias("_at"))
            )
            ids = ids.unionByName(seen)
    # Per event id: in the log (a null position) or not, and the batch's positions in order;
    # every position but the first of an id new to the log is a duplicate.
    per_id = (
        ids.groupBy("event_id")
        .agg(
            F.count("*").alias("_n"),
            F.count("_at").alias("_in_batch"),
            F.sort_array(F.collect_list("_at")).alias("_ats"),
        )
        .where(F.col("_n") > 1)
    )
    logged = F.col("_n") > F.col("_in_batch")
    repeated = F.when(logged, F.col("_ats")).otherwise(F.slice("_ats", 2, F.col("_n")))
    return per_id.select(F.explode(repeated).alias("_at")).select("_at.*")


def _append_lines(
    lake: Lake,
    topic: Topic,
    lines: DataFrame,
    *,
    now: datetime,
    txns: Sequence[AppTxn],
    extra: Mapping[str, Any],
    held: bool,
) -> IngestResult | None:
    """Steps 2 and 3 for already-read lines: with `held`, a batch small enough to hold here
    (`lakelog.log.held_batch`), else through Spark. None if the append was already committed."""
    # The ingest time as a literal: with Spark's generated code on (not lakelog's default,
    # docs/spark.md) the parse stage is compiled anew each batch, as every plan with a batch's
    # bounds is; a one-row frame of it cost a config round trip each batch over Spark Connect.
    stamped = lines.select(*LINE_COLUMNS, literals.timestamp(now).alias(INGEST_TIME))
    parsed = parse_lines(stamped, topic)
    append_parsed = _append_held if held else _append_with_spark
    done = append_parsed(lake, topic, parsed, txns=txns, extra=extra)
    if done is None:
        return None
    result, counts = done
    return IngestResult(
        topic=topic.name,
        batch=extra.get("batch"),
        files=tuple(extra.get("files", ())),
        version=result.version,
        ranges=result.ranges,
        **counts,
    )


Appended = tuple[AppendResult, dict[str, int]]


def _metadata(extra: Mapping[str, Any], counts: dict[str, int], *, read: int, bad: int):
    """The commit metadata of an append of what was not a duplicate; fills `counts` too."""
    def metadata(appended: int) -> dict[str, Any]:
        counts.update(read=read, appended=appended, duplicates=read - bad - appended,
                      dead_letters=bad)
        return {METADATA_KEY: {**extra, **counts}}

    return metadata


def _append_held(
    lake: Lake, topic: Topic, parsed: DataFrame, *, txns: Sequence[AppTxn],
    extra: Mapping[str, Any],
) -> Appended | None:
    """One Spark job: every line's envelope and log partition, or its error, collected; dead
    letters, duplicates and offsets are worked out here."""
    # A bad line's event time is not computed (and cannot fail); a good line's raw text is left
    # out: only dead letters keep it. The headers (the line's file and number, which come back
    # anyway) are made here, not sent back a second time as a map.
    broken = F.col("error").isNotNull()
    kept = parsed.withColumns({held_batch.ERROR: F.col("error"),
                               held_batch.LINE: F.when(broken, F.col("value")),
                               "headers": F.lit(None).cast(HEADERS_TYPE)})
    rows = to_envelope(kept, topic, keep=(*ORDER, held_batch.ERROR, held_batch.LINE),
                       good=~broken).withColumn(
        "partition", partition_of(F.col("key"), topic.partitions))
    good, bad = held_batch.split(driver_write.collect(rows)[0])
    good = held_batch.with_headers(good, *ORDER)
    read = good.num_rows + bad.num_rows
    if bad.num_rows and (dl_snapshot := dead_letters.owed(lake, txns)) is not None:
        lake.write_table(dl_snapshot, held_batch.dead_letter_rows(bad, topic=topic.name),
                         txns=txns)
    bounds = held_batch.time_bounds(good)
    counts: dict[str, int] = {}
    metadata = _metadata(extra, counts, read=read, bad=bad.num_rows)

    def prepare(snapshot: Snapshot) -> tuple[Any, CommitMetadata]:
        return held_batch.new_records(lake, topic, snapshot, good, ORDER, bounds), metadata

    done = append(lake, topic, prepare, order_by=ORDER, txns=txns)
    return None if done is None else (done[0], counts)


def _append_with_spark(
    lake: Lake, topic: Topic, parsed: DataFrame, *, txns: Sequence[AppTxn],
    extra: Mapping[str, Any],
) -> Appended | None:
    """A batch too large to hold: counted, de-duplicated and appended by Spark jobs."""
    # The raw line is kept (cached) only for dead letters; good records are typed already, in
    # columns of their own (`parse_lines`), which Spark's in-memory cache builds far cheaper
    # than a struct.
    parsed = parsed.withColumn(
        "value", F.when(F.col("error").isNotNull(), F.col("value"))).persist()
    try:
        good_time = F.when(F.col("error").isNull(), event_time(topic))
        (stats,) = parsed.agg(
            F.count("*").alias("read"),
            F.count("error").alias("bad"),
            F.min(good_time).alias("lo"),
            F.max(good_time).alias("hi"),
        ).collect()
        read, bad = stats["read"], stats["bad"]
        bounds = (stats["lo"], stats["hi"]) if stats["lo"] is not None else None
        # None bad: nothing to commit, and a retry parses the same lines to none again.
        if bad and (dl_snapshot := dead_letters.owed(lake, txns)) is not None:
            dead = dead_letters.dead_letter_rows(parsed, topic=topic.name)
            lake.write(dl_snapshot, dead, txns=txns, rows_hint=bad)
        good = to_envelope(_with_headers(parsed.where(F.col("error").isNull())), topic,
                           keep=ORDER)
        counts: dict[str, int] = {}
        metadata = _metadata(extra, counts, read=read, bad=bad)

        def prepare(snapshot: Snapshot) -> tuple[DataFrame, CommitMetadata]:
            # Duplicates are few (a re-dropped file at worst): broadcast them, never shuffle the
            # records. They are not counted apart: what the append did not add was a duplicate.
            duplicates = F.broadcast(_duplicates(lake, topic, good, snapshot, bounds))
            return good.join(duplicates, list(ORDER), "left_anti"), metadata

        done = append(lake, topic, prepare, order_by=ORDER, txns=txns, rows_hint=read - bad)
    finally:
        parsed.unpersist()
    return None if done is None else (done[0], counts)


def _committed_counts(lake: Lake, topic: Topic, batch: int) -> dict[str, int]:
    """The counts an earlier attempt of `batch` recorded in its topic commit."""
    for entry in lake.history(topic.path, limit=200):
        info = entry.get(METADATA_KEY)
        if isinstance(info, dict) and info.get("batch") == batch:
            return {k: info[k] for k in ("read", "appended", "duplicates", "dead_letters")}
    return {}


def ingest(
    lake: Lake, spark: SparkSession, topic: Topic, *, now: datetime, max_files: int | None = None,
    on_plan: Callable[[], object] | None = None,
) -> IngestResult:
    """Ingest the topic's new landing files (at most `max_files`) as one exactly-once batch.
    `on_plan` is called once the batch has its plan (a new or a resumed one), before its lines
    are read: when there is something to ingest."""
    manifest = landing.load_manifest(lake, topic.name)
    plan, resumed = manifest.plan, manifest.plan is not None
    if plan is None:
        files = landing.pending_files(lake, manifest)[:max_files]
        if not files:
            return IngestResult(topic.name, None, ())
        plan = landing.IngestPlan(manifest.batch + 1, tuple(files))
        manifest = landing.save_plan(lake, manifest, plan, now=now)  # step 1
    if on_plan is not None:
        on_plan()
    names = [f for f, _ in plan.files]
    txn = AppTxn(f"lakelog.ingest:{topic.name}", plan.batch)
    lines = read_landing_lines(spark, lake, names)
    held = sum(size for _, size in plan.files) <= held_batch.SMALL_INGEST_BYTES
    result = _append_lines(  # steps 2 and 3
        lake, topic, lines, now=now, txns=[txn], extra={"batch": plan.batch, "files": names},
        held=held,
    )
    if result is None:
        result = IngestResult(
            topic.name, plan.batch, tuple(names), **_committed_counts(lake, topic, plan.batch)
        )
    landing.save_done(lake, manifest, plan, now=now)  # step 4
    return replace(result, resumed=resumed)


def ingest_topics(
    lake: Lake, spark: SparkSession, topics: Sequence[Topic], *, now: Callable[[], datetime]
) -> list[IngestResult]:
    """Ingest every pending landing file of each topic, batch after batch, topics concurrently.

    Topics are independent tables: ingesting them at once overlaps Spark's per-job latency
    (scheduling, commits) without changing any result.
    """
    def drain(topic: Topic) -> list[IngestResult]:
        done = []
        while (result := ingest(lake, spark, topic, now=now())).batch is not None:
            done.append(result)
        return done

    if not topics:
        return []
    with ThreadPoolExecutor(max_workers=len(topics)) as pool:
        return [result for results in pool.map(drain, topics) for result in results]


def produce(
    lake: Lake, spark: SparkSession, topic: Topic, lines: Sequence[str], *, source: str,
    now: datetime,
) -> IngestResult:
    """Append records given as NDJSON lines, validated and de-duplicated like landing files."""
    result = _append_lines(
        lake, topic, lines_frame(spark, lines, source=source), now=now, txns=(),
        extra={"source": source},
        held=sum(len(line) for line in lines) <= held_batch.SMALL_INGEST_BYTES,
    )
    assert result is not None  # no application transaction, so never "already committed"
    return result
