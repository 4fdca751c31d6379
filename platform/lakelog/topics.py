"""Topic declarations: name, payload schema, key, log-partition count, retention.

A topic is stored as the Delta table ``log/<name>``, partitioned by log partition, with the
envelope columns of `ENVELOPE` around the payload columns of its schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

from pyspark.sql import types as T

from lakelog.errors import ConfigError

NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,99}$")

#: Columns every topic table has besides the payload; they cannot be payload field names.
RESERVED = ("partition", "offset", "key", "event_time", "headers", "ingest_time")


@dataclass(frozen=True)
class Retention:
    """How much of a log to keep. Either bound may be None (unbounded)."""

    time: timedelta | None = None
    bytes: int | None = None
    #: Delete data that a consumer has not yet committed past (Kafka's behaviour). When False,
    #: retention never advances a log partition's start beyond the slowest consumer's offset.
    ignore_consumers: bool = False


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

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ConfigError(
                f"topic name {self.name!r} must be lowercase letters, digits, '_', '.', '-'"
            )
        if self.partitions < 1:
            raise ConfigError(f"topic {self.name}: partitions must be >= 1")
        names = self.schema.fieldNames()
        for required in (self.key, self.event_id):
            if required not in names:
                raise ConfigError(f"topic {self.name}: field {required!r} is not in the schema")
        for reserved in RESERVED:
            if reserved in names:
                raise ConfigError(f"topic {self.name}: {reserved!r} is a reserved column name")
        if self.event_id != "event_id" and "event_id" in names:
            raise ConfigError(f"topic {self.name}: 'event_id' is reserved for the event id")
        if self.time:
            for name in (self.time.event, self.time.sent, self.time.received):
                if name is None:
                    continue
                if name not in names:
                    raise ConfigError(f"topic {self.name}: time field {name!r} is not in the schema")
                if not isinstance(self.schema[name].dataType, T.TimestampType):
                    raise ConfigError(f"topic {self.name}: time field {name!r} must be a timestamp")

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
    def payload_fields(self) -> list[T.StructField]:
        return [f for f in self.schema.fields if f.name != self.event_id]

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
