"""Records of the demo's searches, clicks, orders and customer changes, and a driver for
window-join steps."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from lakelog.demo.shop import CLICKS, ORDERS, SEARCHES
from lakelog.demo.shop_cdc import CHANGELOGS
from lakelog.joins import WindowJoin, match_batch
from lakelog.joins.matching import buffer_schema
from lakelog.log.topics import Topic

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
CHANGES = CHANGELOGS["cdc.customers"]


def at(minute: float) -> datetime:
    return T0 + timedelta(minutes=minute)


def local(moment: datetime) -> datetime:
    """`moment` as PySpark returns timestamps: naive, in the local time zone."""
    return moment.astimezone().replace(tzinfo=None)


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _payload(event_id: str, minute: float, fields: dict, user: str = "u-000123") -> dict:
    t = iso(at(minute))
    return {"event_id": event_id, "user_id": user, **fields,
            "device_time": t, "sent_time": t, "received_time": t}


def search_fields(query: str, session: str) -> dict:
    return {"session_id": session, "query_id": query, "query": "red shoes", "results": ["p-1"]}


def click_fields(query: str, session: str) -> dict:
    return {"session_id": session, "query_id": query, "product_id": "p-1", "position": 1}


def search_line(event_id: str, minute: float, *, query: str, session: str = "s1",
                user: str = "u-000123") -> str:
    return json.dumps(_payload(event_id, minute, search_fields(query, session), user))


def click_line(event_id: str, minute: float, *, query: str, session: str = "s1") -> str:
    return json.dumps(_payload(event_id, minute, click_fields(query, session)))


def order_line(event_id: str, minute: float, *, customer: int, total: float) -> str:
    fields = {"session_id": "s1", "order_id": f"o-{event_id}", "cart_id": "c1",
              "items": [{"product_id": "p-1", "quantity": 1, "unit_price": total}],
              "total": total}
    payload = _payload(event_id, minute, fields)
    payload["user_id"] = f"u-{customer:06d}"
    return json.dumps(payload)


OFFSETS = itertools.count()


def record(topic: Topic, event_id: str, minute: float, fields: dict) -> tuple:
    """A row of `topic`'s records as a consumer reads them (event time = device time), at a
    new offset: a record delivered twice is two records."""
    t = at(minute)
    values = {"partition": 0, "offset": next(OFFSETS), "key": "u-000123", "event_id": event_id,
              "event_time": t, "user_id": "u-000123", "device_time": t, "sent_time": t,
              "received_time": t, "ingest_time": t, **fields}
    return tuple(values.get(name) for name in topic.table_schema.fieldNames())


def search(event_id: str, minute: float, *, query: str, session: str = "s1") -> tuple:
    return record(SEARCHES, event_id, minute, search_fields(query, session))


def click(event_id: str, minute: float, *, query: str | None, session: str = "s1") -> tuple:
    return record(CLICKS, event_id, minute, click_fields(query, session))


class Steps:
    """Runs `lakelog.joins.match_batch` batch after batch, keeping the buffer in memory the way the
    consumer keeps it in its state table (upsert the buffered rows, delete the expired)."""

    def __init__(self, spark: SparkSession, join: WindowJoin) -> None:
        self.spark, self.join = spark, join
        self.schema = buffer_schema(join)
        self.buffer: list[tuple] = []
        self.batch = 0

    def frame(self, topic: Topic, rows: list[tuple]) -> DataFrame:
        return self.spark.createDataFrame(rows, topic.table_schema)

    def run(
        self,
        searches: list[tuple],
        clicks: list[tuple],
        *,
        before: datetime | None,
        after: datetime | None,
    ) -> tuple[list[Row], list[Row]]:
        """One batch: its joined rows and late rows."""
        self.batch += 1
        result = match_batch(
            self.join, self.frame(SEARCHES, searches), self.frame(CLICKS, clicks),
            self.spark.createDataFrame(self.buffer, self.schema),
            before=before, after=after, batch=self.batch,
        )
        changes = result.buffered.withColumn("_gone", F.lit(False)).unionByName(
            result.expired.withColumn("_gone", F.lit(True)), allowMissingColumns=True
        ).collect()
        touched = {(r["_side"], r["_event_id"]) for r in changes}
        self.buffer = [r for r in self.buffer if (r[0], r[1]) not in touched]
        self.buffer += [tuple(r[n] for n in self.schema.fieldNames())
                        for r in changes if not r["_gone"]]
        return result.joined.collect(), result.late.collect()


def change_line(op: str, customer: int, *, lsn: int, minute: float, name: str | None = None,
                country: str = "NL") -> str:
    """A Debezium change of the shop's customers table, committed at `minute`."""
    ts = int(at(minute).timestamp() * 1000)
    row = None if op == "d" else {
        "customer_id": customer, "name": name, "email": f"{name}@x".lower(), "country": country,
        "updated_at": iso(at(minute)),
    }
    key_only = {"customer_id": customer, "name": None, "email": None, "country": None,
                "updated_at": None}
    return json.dumps({
        "before": key_only if op in ("u", "d") else None,
        "after": row,
        "op": op,
        "ts_ms": ts,
        "source": {"connector": "postgresql", "name": "shop", "ts_ms": ts, "snapshot": "false",
                   "table": "customers", "lsn": lsn, "commit_lsn": lsn},
    })


def order(event_id: str, minute: float, *, customer: int | None, total: float = 1.0) -> tuple:
    """A record of the orders topic by user ``u-<customer>`` (no customer: a bad user id)."""
    user = "bogus" if customer is None else f"u-{customer:06d}"
    fields = {"user_id": user, "key": user, "session_id": "s1", "order_id": f"o-{event_id}",
              "cart_id": "c1", "items": [("p-1", 1, total)], "total": total}
    return record(ORDERS, event_id, minute, fields)


def customer_row(customer: int, name: str | None, *, position: str, deleted: bool = False,
                 minute: float = 0, country: str = "NL", valid: tuple | None = None) -> dict:
    """A row of ``tables/customers`` (or, with `valid` = (from, to) minutes, of the history)."""
    row = {"customer_id": customer, "name": None if deleted else name,
           "email": None if deleted else f"{name}@x".lower(),
           "country": None if deleted else country, "updated_at": None,
           "_position": position, "_op": "d" if deleted else "u", "_deleted": deleted,
           "_commit_time": at(minute)}
    if valid is not None:
        start, end = valid
        row.update(valid_from=at(start), valid_to=None if end is None else at(end),
                   is_current=end is None and not deleted)
    return row


def position(lsn: int) -> str:
    """A changelog position (`lakelog.cdc.changelog.position`) of a change at `lsn`."""
    return f"{lsn:016X}{lsn:016X}"


def change(op: str, customer: int, *, lsn: int, minute: float, name: str | None = None) -> tuple:
    """A record of the ``cdc.customers`` topic as a consumer reads it."""
    event = json.loads(change_line(op, customer, lsn=lsn, minute=minute, name=name))
    for row in (event["before"], event["after"]):
        if row:
            row["updated_at"] = None
    values = {**event, "partition": 0, "offset": next(OFFSETS), "key": str(customer),
              "event_id": f"{position(lsn)}:{customer}", "event_time": at(minute),
              "pk": str(customer), "position": position(lsn), "commit_time": at(minute),
              "ingest_time": at(minute)}
    return tuple(values.get(name) for name in CHANGES.table_schema.fieldNames())
