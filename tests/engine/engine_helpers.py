"""Small topics, records and landing files for engine tests."""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.consumers import BatchInput, Output
from lakelog.demo import oltp
from lakelog.lake import EmbeddedLake
from lakelog.log.topics import EventTime, Topic

BASE = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)

SCHEMA = T.StructType(
    [
        T.StructField("event_id", T.StringType(), False),
        T.StructField("user_id", T.StringType(), False),
        T.StructField("product_id", T.StringType()),
        T.StructField("amount", T.DoubleType()),
        T.StructField("device_time", T.TimestampType(), False),
        T.StructField("sent_time", T.TimestampType(), False),
        T.StructField("received_time", T.TimestampType(), False),
    ]
)


def table_loads(monkeypatch) -> list[str]:
    """The paths of the Delta tables the embedded lake loads from now on (a few ms each), in
    order: a list the caller may clear between the steps it counts."""
    loads: list[str] = []
    load = EmbeddedLake._delta

    def counted(self, path, version=None):
        loads.append(path)
        return load(self, path, version)

    monkeypatch.setattr(EmbeddedLake, "_delta", counted)
    return loads


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def record(i: int, *, user: str | None = None, seconds: float | None = None, **fields) -> dict:
    device = BASE + timedelta(seconds=i if seconds is None else seconds)
    data = {
        "event_id": f"e{i}",
        "user_id": user or f"u{i % 7}",
        "product_id": f"p{i % 3}",
        "amount": float(i),
        "device_time": iso(device),
        "sent_time": iso(device + timedelta(seconds=2)),
        "received_time": iso(device + timedelta(seconds=3)),
    }
    data.update(fields)
    return data


def make_topic(name: str = "events", partitions: int = 3, **kwargs) -> Topic:
    return Topic(
        name,
        SCHEMA,
        key="user_id",
        partitions=partitions,
        time=EventTime("device_time", "sent_time", "received_time"),
        **kwargs,
    )


#: Running totals per product of a `make_topic` topic named ``events``: a keyed output that a
#: replay would count twice (`add_to_totals` is its transform).
TOTALS = Output(
    "streams/totals",
    T.StructType([T.StructField("product_id", T.StringType()), T.StructField("n", T.LongType()),
                  T.StructField("amount", T.DoubleType())]),
    keys=("product_id",),
)


def add_to_totals(batch: BatchInput):
    delta = batch.records["events"].groupBy("product_id").agg(
        F.count("*").alias("dn"), F.sum("amount").alias("da"))
    joined = delta.join(batch.current(TOTALS), "product_id", "left")
    return {TOTALS.path: joined.select(
        "product_id", (F.col("dn") + F.coalesce("n", F.lit(0))).alias("n"),
        (F.col("da") + F.coalesce("amount", F.lit(0.0))).alias("amount"))}


def drop(lake_root: str, topic: str, name: str, lines: list) -> Path:
    """Write a landing file the way an uploader would: hidden temp name, then rename."""
    folder = Path(lake_root) / "landing" / topic
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines)
    tmp = folder / f".{name}.tmp"
    tmp.write_text(text)
    tmp.rename(folder / name)
    return folder / name


class CrashAfterCommit(EmbeddedLake):
    """Once armed, fails right after its next commit to table `path`: that output is written,
    whatever the batch does after it (later outputs, the offset commit) is not."""

    def __init__(self, spark, root, path):
        super().__init__(spark, root)
        self.path, self.armed = path, False

    def _commit(self, snapshot, adds, removed, txns, metadata):
        version = super()._commit(snapshot, adds, removed, txns, metadata)
        if self.armed and snapshot.path == self.path:
            self.armed = False
            raise RuntimeError(f"crash after committing {self.path}")
        return version


#: A captured source table (the demo shop's customers) for changelog tests.
CUSTOMERS = oltp.TABLES[0]
ROW = CUSTOMERS.spark_schema()


def change(op, key, *, lsn, commit=None, name=None, ts=1_772_366_400_000):
    """A Debezium change event of a `CUSTOMERS` row, as JSON."""
    row = None if name is None else {
        "customer_id": key, "name": name, "email": f"{name}@x", "country": "NL",
        "updated_at": "2026-03-01T12:00:00.000000Z",
    }
    key_only = {"customer_id": key, "name": None, "email": None, "country": None,
                "updated_at": None}
    return json.dumps({
        "before": key_only if op in ("u", "d") else None,
        "after": row if op != "d" else None,
        "op": op,
        "ts_ms": ts,
        "source": {"connector": "postgresql", "name": "shop", "ts_ms": ts, "snapshot": "false",
                   "table": "customers", "lsn": lsn, "commit_lsn": commit or lsn},
    })


@contextmanager
def session_time_zone(spark, zone: str):
    """`spark`'s session time zone set to `zone` for a while, as in a session a user built."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
