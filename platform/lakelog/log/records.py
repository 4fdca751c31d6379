"""Parsing and validating NDJSON records against a topic's schema.

Each line is parsed into the typed schema (a type violation marks the record corrupt), the topic's
derived columns are computed and its rules checked; only suspect lines are parsed a second time,
as a flat ``map<string,string>``, to tell which field is wrong and whether a required field is
missing. The result has the typed envelope columns and an `error` column
that is null for good records and says why for bad ones: nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.log.topics import RESERVED_PREFIX, Topic

CORRUPT = "_corrupt_record"


#: `parse_lines`' working columns, dropped from its result.
_SUSPECT, _RAW = f"{RESERVED_PREFIX}suspect", f"{RESERVED_PREFIX}raw"
#: A typed field's column in `parse_lines`' result, and a decoded field's wire value: under the
#: reserved prefix, so no payload field's name can clash with the lines' own columns.
TYPED_PREFIX, _WIRE_PREFIX = f"{RESERVED_PREFIX}t_", f"{RESERVED_PREFIX}w_"


def _typed_name(name: str) -> str:
    return f"{TYPED_PREFIX}{name}"


def _wire_name(field: str) -> str:
    return f"{_WIRE_PREFIX}{field}"


def typed_col(name: str) -> Column:
    """The column of the typed field `name` in `parse_lines`' result."""
    return F.col(f"`{_typed_name(name)}`")


def _typed_struct(names: Sequence[str]) -> Column:
    """The typed fields `names` as one struct, for the topic's rules and derived columns, which
    take the record as a struct: a field read from it is the field's own column again (Spark
    simplifies a field of a struct built in the same plan)."""
    return F.struct(*[typed_col(n).alias(n) for n in names])


def _first_error(checks: list[tuple[Column, Column]]) -> Column:
    expr = F.lit(None).cast("string")
    for condition, message in reversed(checks):
        expr = F.when(condition, message).otherwise(expr)
    return expr


def typed_fields(topic: Topic) -> list[str]:
    """The typed field names of `parse_lines`' result, in order, known without asking Spark:
    the wire fields, the corrupt-record marker, then derived fields not among them."""
    names = [f.name for f in topic.wire_schema.fields] + [CORRUPT]
    return names + [d.name for d in topic.derived if d.name not in names]


def parse_lines(lines: DataFrame, topic: Topic) -> DataFrame:
    """`lines` (a string column `value` plus any source columns) → typed fields + `error`.

    Blank lines are not records and are dropped; every other line comes out exactly once.
    The result's columns are those of `lines`, then each typed field (`typed_fields`) as a
    column of its own (`typed_col`), then `error`.

    The fields are flattened as the line is parsed: Spark without generated code (lakelog's
    default) reads a field of a struct stored in a row by resolving its type each time (Spark
    4.2 builds the task's SQL conf to do so), where a column is read directly; a field read
    twice also went through the projection's common-subexpression cache
    (`benchmarks/bench_struct_fields.py`: 42 % less time flattened).
    """
    schema = T.StructType(
        [T.StructField(f.name, f.dataType) for f in topic.wire_schema.fields]
        + [T.StructField(CORRUPT, T.StringType())]
    )
    names = schema.fieldNames()
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    nonblank = lines.where(F.trim(F.col("value")) != "")
    # A line that is not a JSON object parses to null: `inline` gives it a row of nulls.
    parsed = nonblank.select("*", F.inline(F.array(F.from_json("value", schema, options)))
                             .alias(*map(_typed_name, names)))
    undecodable: list[Column] = []
    wire_of = {d.field: F.col(f"`{_wire_name(d.field)}`") for d in topic.decoders}
    if wire_of:  # each decoded field's wire value kept beside it, for the problem it may report
        parsed = parsed.withColumns({_wire_name(f): typed_col(f) for f in wire_of})
        parsed = parsed.withColumns({_typed_name(d.field): d.decode(wire_of[d.field])
                                     for d in topic.decoders})
        undecodable = [d.problem(wire_of[d.field], typed_col(d.field)) for d in topic.decoders]
    for d in topic.derived:
        parsed = parsed.withColumn(_typed_name(d.name),
                                   d.expr(_typed_struct(names)).cast(d.type))
        names += [] if d.name in names else [d.name]
    typed = _typed_struct(typed_fields(topic))  # the same names
    broken = [(~F.coalesce(rule.holds(typed), F.lit(False)), F.lit(rule.message))
              for rule in topic.rules]
    broken += [(problem.isNotNull(), problem) for problem in undecodable]
    suspect = typed[CORRUPT].isNotNull()
    for name in topic.required_fields:
        suspect = suspect | typed[name].isNull()
    for condition, _ in broken:
        suspect = suspect | condition
    # Whether a line is suspect, and (only for those) the line parsed a second time as a flat
    # map to say what is wrong, are columns of their own, each computed once per line: as
    # expressions repeated in every check, the interpreted projection evaluated them through
    # its common-subexpression cache, a cache look-up per use and line.
    parsed = parsed.withColumn(_SUSPECT, suspect)
    suspect = F.col(_SUSPECT)
    parsed = parsed.withColumn(
        _RAW, F.when(suspect, F.from_json("value", T.MapType(T.StringType(), T.StringType()))))
    raw = F.col(_RAW)
    checks: list[tuple[Column, Column]] = [
        (raw.isNull(), F.lit("malformed JSON: not a JSON object")),
    ]
    derived = [d.name for d in topic.derived if d.name in topic.required_fields]
    for name in topic.required_fields:
        if name not in derived:
            checks.append(
                (F.element_at(raw, name).isNull(), F.lit(f"missing required field '{name}'"))
            )
    for field, wire in zip(topic.schema.fields, topic.wire_schema.fields):
        raw_value = F.element_at(raw, field.name)
        wrong = typed[field.name].isNull()
        if isinstance(wire.dataType, T.StructType):  # a nested mismatch leaves a partial struct
            nested = T.StructType([*wire.dataType.fields, T.StructField(CORRUPT, T.StringType())])
            wrong = wrong | F.from_json(raw_value, nested, options)[CORRUPT].isNotNull()
        checks.append(
            (
                typed[CORRUPT].isNotNull() & wrong & raw_value.isNotNull(),
                F.concat(
                    F.lit(f"field '{field.name}' is not a valid {field.dataType.simpleString()}: "),
                    F.substring(raw_value, 1, 200),
                ),
            )
        )
    checks += broken
    checks += [(typed[name].isNull(), F.lit(f"cannot derive '{name}'")) for name in derived]
    checks.append((F.lit(True), F.lit("record does not match the topic schema")))
    parsed = parsed.withColumn("error", F.when(suspect, _first_error(checks)))
    return parsed.drop(_SUSPECT, _RAW, *map(_wire_name, wire_of))


INGEST_TIME = "_ingest_time"


def record_json() -> Column:
    """The whole record as JSON text (a late or rejected table's `record`): every column of the
    frame it is selected from, by a star, so that no schema is asked of Spark (a round trip
    over Spark Connect)."""
    return F.to_json(F.struct("*"))


def event_time(topic: Topic) -> Column:
    """The corrected event time of a parsed record (see `EventTime`); the ingest time if none."""
    if topic.time is None:
        return F.col(INGEST_TIME)
    if topic.time.sent and topic.time.received:
        skew_us = (F.unix_micros(typed_col(topic.time.received))
                   - F.unix_micros(typed_col(topic.time.sent)))
        return F.timestamp_micros(F.unix_micros(typed_col(topic.time.event)) + skew_us)
    return typed_col(topic.time.event)


def to_envelope(
    parsed: DataFrame, topic: Topic, *, keep: Sequence[str] = (), good: Column | None = None
) -> DataFrame:
    """Good parsed records → topic envelope columns (without partition and offset), then the
    columns `keep` (e.g. the records' source file and line). Given `good` (true for a good
    record), the event time of any other row is null, not computed.

    The ingest time comes from the `_ingest_time` column."""
    time = event_time(topic) if good is None else F.when(good, event_time(topic))
    return parsed.select(
        typed_col(topic.key).cast("string").alias("key"),
        typed_col(topic.event_id).cast("string").alias("event_id"),
        time.alias("event_time"),
        *[typed_col(f.name).alias(f.name) for f in topic.payload_fields],
        F.col("headers"),
        F.col(INGEST_TIME).alias("ingest_time"),
        *keep,
    )
