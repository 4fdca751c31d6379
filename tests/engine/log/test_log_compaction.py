"""Log compaction of a changelog topic: latest per key in closed files, offsets kept, tombstones
kept for their retention, and a compacted table rebuilt from the compacted log is the same."""

from __future__ import annotations

from datetime import timedelta

import pytest
from engine_helpers import CUSTOMERS, ROW, change

from lakelog import consumers
from lakelog.cdc.changelog import changelog_topic
from lakelog.cdc.compacted import CompactedTable
from lakelog.demo import shop
from lakelog.errors import ConfigError
from lakelog.log import ingest
from lakelog.log.compaction import compact_topic
from lakelog.log.offsets import heads

TOPIC = changelog_topic("customers", ROW, CUSTOMERS.primary_key, partitions=1)
TOPICS = {TOPIC.name: TOPIC}


def log(lake):
    rows = lake.read(lake.snapshot(TOPIC.path)).collect()
    return sorted((r["offset"], r["pk"], r["op"]) for r in rows)


def table(lake, name, now):
    compacted = CompactedTable(name, TOPIC, ROW, CUSTOMERS.primary_key)
    consumers.run_until_caught_up(lake, compacted.consumer, TOPICS, now=lambda: now)
    return sorted(tuple(r) for r in lake.read(lake.snapshot(compacted.path)).collect())


def test_keeps_the_latest_record_per_key_and_their_offsets(lake, spark, now):
    batches = [
        [change("c", 1, lsn=1, name="a1"), change("c", 2, lsn=2, name="b1"),
         change("c", 3, lsn=3, name="c1")],
        [change("u", 1, lsn=4, name="a2"), change("u", 2, lsn=5, name="b2"), change("d", 3, lsn=6)],
        [change("u", 1, lsn=7, name="a3")],
        [change("c", 4, lsn=8, name="d1"), change("u", 1, lsn=9, name="a4")],  # the active file
    ]
    for lines in batches:
        ingest.produce(lake, spark, TOPIC, lines, source="test", now=now)
    original = table(lake, "before", now)
    head = heads(lake.snapshot(TOPIC.path), 1)

    # Nothing is old enough yet (min lag one hour).
    assert compact_topic(lake, TOPIC, now=now + timedelta(minutes=30)).version is None
    result = compact_topic(lake, TOPIC, now=now + timedelta(hours=2))
    assert (result.records_before, result.records_after, result.tombstones_removed) == (7, 3, 0)
    # 1's latest closed record (offset 6) stays although the active file supersedes it.
    assert log(lake) == [(4, "2", "u"), (5, "3", "d"), (6, "1", "u"), (7, "4", "c"), (8, "1", "u")]
    assert heads(lake.snapshot(TOPIC.path), 1) == head
    assert table(lake, "rebuilt", now) == original

    # After the delete retention, the tombstone goes too; the rest is unchanged.
    later = compact_topic(lake, TOPIC, now=now + timedelta(days=2))
    assert later.tombstones_removed == 1
    assert log(lake) == [(4, "2", "u"), (6, "1", "u"), (7, "4", "c"), (8, "1", "u")]
    assert compact_topic(lake, TOPIC, now=now + timedelta(days=2)).version is None


def test_a_topic_without_compaction_is_refused(lake, now):
    with pytest.raises(ConfigError, match="not compacted"):
        compact_topic(lake, shop.PAGE_VIEWS, now=now)
