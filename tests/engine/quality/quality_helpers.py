"""Topic records and suite outcomes for the quality tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pyspark.sql import types as T

from lakelog.log.offsets import append

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)


def failed(outcome) -> dict[str, object]:
    return {f.expectation: f for f in outcome.failures}


def append_page_views(lake, spark, topic, count: int) -> None:
    """`count` records appended by the log itself: log partition by key, offsets from its heads."""
    rows = [
        {"key": f"u-{i % 3}", "event_id": f"v{i}", "event_time": T0 + timedelta(seconds=i),
         "user_id": f"u-{i % 3}", "session_id": "s", "page": "home", "product_id": None,
         "device_time": T0, "sent_time": T0, "received_time": T0, "headers": {},
         "ingest_time": T0}
        for i in range(count)
    ]
    schema = T.StructType([f for f in topic.table_schema.fields
                           if f.name not in ("partition", "offset")])
    records = spark.createDataFrame(rows, schema)
    append(lake, topic, lambda snapshot: (records, {}), order_by=["event_id"])
