"""Topic declarations: name, payload schema, key, log-partition count, retention.

A topic is stored as the Delta table ``log/<name>``, partitioned by log partition, with the
envelope columns of `ENVELOPE` around the payload columns of its schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from pyspark.sql import Column
from pyspark.sql import types as T

from lakelog.errors import ConfigError

NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,99}$")

#: Columns every topic table has besides the payload; they cannot be payload field names.
RESERVED = ("partition", "offset", "key", "event_time", "headers", "ingest_time")
#: Columns lakelog adds to records while it works on them (a bad line's error and text in an
#: ingest batch, `lakelog.log.held_batch`; markers and indices elsewhere) start so.
RESERVED_PREFIX = "_lakelog_"


@dataclass(frozen=True)
class Retention:
    """How much of a log to keep. Either bound may be None (unbounded)."""

    time: timedelta | None = None
    bytes: int | None = None
    #: Delete data that a consumer has not yet committed past (Kafka's behaviour). When False,
    #: retention never advances a log partition's start beyond the slowest consumer's offset.
    ignore_consumers: bool = False


@dataclass(frozen=True)
class Compaction:
    """Kafka's ``cleanup.policy=compact``: closed data keeps only the latest record per key.

    A record becomes compactable once it is `min_lag` old (``min.compaction.lag.ms``);
    `tombstone` is a SQL condition on the topic's columns marking a record as a deletion marker
    (e.g. ``op = 'd'``), kept `delete_retention` after it was appended and then removed
    (``delete.retention.ms``).
    """

    min_lag: timedelta = timedelta(hours=1)
    delete_retention: timedelta = timedelta(days=1)
    tombstone: str | None = None


@dataclass(frozen=True)
class EventTime:
    """Names of the payload's three timestamps (DESIGN: device event, device send, server receive).

    The topic's corrected `event_time` is ``event + (received - sent)`` when both `sent` and
    `received` are given, which removes a device's clock skew; else it is the `event` field.
    """

    event: str
    sent: str | None = None
    received: str | None = None


@dataclass(frozen=True)
class Derived:
    """A payload column computed from the parsed record, stored like a field of the schema.

    `expr` gets the typed record (a struct column of the schema's fields) and returns the value,
    cast to `type`. A changelog, for instance, derives its key from ``after`` or ``before``, so
    records in a format the topic does not own (Debezium's) need no rewriting before ingest.
    """

    name: str
    type: T.DataType
    expr: Callable[[Column], Column]


@dataclass(frozen=True)
class Rule:
    """A condition every record must meet; a record that fails it is a dead letter with `message`."""

    message: str
    holds: Callable[[Column], Column]


@dataclass(frozen=True)
class Decoder:
    """A field that arrives in another form than its schema type and is decoded at ingest.

    The field is parsed from JSON as `wire`; `decode` turns that into the schema's type and
    `problem`, given the wire and the decoded value, says what is wrong with a value that did not
    decode (null when nothing is): such a record is a dead letter with that message.
    """

    field: str
    wire: T.DataType
    decode: Callable[[Column], Column]
    problem: Callable[[Column, Column], Column]


@dataclass(frozen=True)
class Topic:
    name: str
    schema: T.StructType
    key: str
    partitions: int = 4
    event_id: str = "event_id"
    time: EventTime | None = None
    retention: Retention = field(default_factory=Retention)
    #: Records whose event id was appended within this much event time are duplicates.
    dedup_window: timedelta = timedelta(hours=1)
    #: Log compaction (None: the topic only expires data by its retention).
    compaction: Compaction | None = None
    #: Columns computed from each record; `key`, `event_id` and `time` may name them.
    derived: tuple[Derived, ...] = ()
    #: Conditions beyond the schema; a record that breaks one is dead-lettered.
    rules: tuple[Rule, ...] = ()
    #: Fields parsed in a wire form and decoded to their schema type (e.g. Debezium encodings).
    decoders: tuple[Decoder, ...] = ()

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ConfigError(
                f"topic name {self.name!r} must be lowercase letters, digits, '_', '.', '-'"
            )
        if self.partitions < 1:
            raise ConfigError(f"topic {self.name}: partitions must be >= 1")
        names = self.schema.fieldNames() + [d.name for d in self.derived]
        if len(set(names)) != len(names):
            raise ConfigError(f"topic {self.name}: a derived column repeats a field name")
        for required in (self.key, self.event_id):
            if required not in names:
                raise ConfigError(f"topic {self.name}: field {required!r} is not in the schema")
        for reserved in RESERVED:
            if reserved in names:
                raise ConfigError(f"topic {self.name}: {reserved!r} is a reserved column name")
        for name in names:
            if name.lower().startswith(RESERVED_PREFIX):
                raise ConfigError(f"topic {self.name}: {name!r} starts with {RESERVED_PREFIX!r}, "
                                  "which names lakelog's own working columns")
        if self.event_id != "event_id" and "event_id" in names:
            raise ConfigError(f"topic {self.name}: 'event_id' is reserved for the event id")
        if self.time:
            for name in (self.time.event, self.time.sent, self.time.received):
                if name is None:
                    continue
                if name not in names:
                    raise ConfigError(f"topic {self.name}: time field {name!r} is not in the schema")
                if not isinstance(self.field_type(name), T.TimestampType):
                    raise ConfigError(f"topic {self.name}: time field {name!r} must be a timestamp")

    def field_type(self, name: str) -> T.DataType:
        for d in self.derived:
            if d.name == name:
                return d.type
        return self.schema[name].dataType

    @property
    def path(self) -> str:
        return f"log/{self.name}"

    @property
    def required_fields(self) -> list[str]:
        """Fields a record must carry: the key, the event id, the timestamps, non-nullable fields."""
        required = [self.key, self.event_id]
        if self.time:
            required += [n for n in (self.time.event, self.time.sent, self.time.received) if n]
        required += [f.name for f in self.schema.fields if not f.nullable]
        return list(dict.fromkeys(required))

    @property
    def wire_schema(self) -> T.StructType:
        """The schema records are parsed with: the schema, decoded fields in their wire form."""
        wire = {d.field: d.wire for d in self.decoders}
        return T.StructType([
            T.StructField(f.name, wire.get(f.name, f.dataType), f.nullable)
            for f in self.schema.fields
        ])

    @property
    def payload_fields(self) -> list[T.StructField]:
        """The table's payload columns: the schema's fields, then the derived ones."""
        fields = self.schema.fields + [T.StructField(d.name, d.type) for d in self.derived]
        return [f for f in fields if f.name != self.event_id]

    @property
    def table_schema(self) -> T.StructType:
        """The Delta table schema: envelope around the payload."""
        return T.StructType(
            [
                T.StructField("partition", T.IntegerType()),
                T.StructField("offset", T.LongType()),
                T.StructField("key", T.StringType()),
                T.StructField("event_id", T.StringType()),
                T.StructField("event_time", T.TimestampType()),
                *[T.StructField(f.name, f.dataType) for f in self.payload_fields],
                T.StructField("headers", T.MapType(T.StringType(), T.StringType())),
                T.StructField("ingest_time", T.TimestampType()),
            ]
        )
