"""A captured source database declared once: its changelog topics and derived tables.

`captured_source` builds, for every table, the changelog topic ``cdc.<table>``, the compacted
table ``tables/<table>`` and the history table ``history/<table>`` with their consumers; the
Dagster layer turns one declaration into the capture, topic, table and check assets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lakelog.cdc import SourceTable
from lakelog.changelog import changelog_topic
from lakelog.compacted import CompactedTable
from lakelog.consumers import Consumer
from lakelog.history import HistoryTable
from lakelog.topics import Topic


@dataclass(frozen=True)
class CapturedSource:
    server_name: str
    tables: tuple[SourceTable, ...]
    changelogs: Mapping[str, Topic]  # by topic name (cdc.<table>)
    compacted: Mapping[str, CompactedTable]  # by table name
    history: Mapping[str, HistoryTable]  # by table name

    @property
    def consumers(self) -> dict[str, Consumer]:
        found = [*(t.consumer for t in self.compacted.values()),
                 *(t.consumer for t in self.history.values())]
        return {c.name: c for c in found}


def captured_source(
    server_name: str, tables: tuple[SourceTable, ...], *, partitions: int = 4
) -> CapturedSource:
    changelogs = {
        t.topic: changelog_topic(t.name, t.spark_schema(), t.primary_key, partitions=partitions)
        for t in tables
    }
    return CapturedSource(
        server_name,
        tables,
        changelogs,
        compacted={t.name: CompactedTable(t.name, changelogs[t.topic], t.spark_schema(),
                                          t.primary_key) for t in tables},
        history={t.name: HistoryTable(t.name, changelogs[t.topic], t.spark_schema(),
                                      t.primary_key) for t in tables},
    )
