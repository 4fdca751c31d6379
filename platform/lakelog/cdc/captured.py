"""A captured source database declared once: its changelog topics and derived tables.

`captured_source` builds, for every table, the changelog topic ``cdc.<table>``, the compacted
table ``tables/<table>`` and the history table ``history/<table>`` with their consumer; the
Dagster layer turns one declaration into the capture, topic, table and check assets.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame

from lakelog.cdc import SourceTable
from lakelog.cdc.changelog import changelog_topic
from lakelog.cdc.compacted import CompactedTable
from lakelog.cdc.history import HistoryTable
from lakelog.consumers import BatchInput, Consumer
from lakelog.errors import ConfigError
from lakelog.log.topics import Topic


@dataclass(frozen=True)
class CapturedSource:
    server_name: str
    tables: tuple[SourceTable, ...]
    changelogs: Mapping[str, Topic]  # by topic name (cdc.<table>)
    compacted: Mapping[str, CompactedTable]  # by table name
    history: Mapping[str, HistoryTable]  # by table name

    @property
    def consumers(self) -> dict[str, Consumer]:
        """Per table one consumer of its changelog writing both its compacted and history
        table: each microbatch reads the changes once, and the two tables advance together."""
        found = [self.consumer_of(t.name) for t in self.tables]
        return {c.name: c for c in found}

    def consumer_of(self, table: str) -> Consumer:
        """The consumer writing `table`'s compacted and history tables."""
        return table_consumer(self.compacted[table], self.history[table])


def table_consumer(compacted: CompactedTable, history: HistoryTable) -> Consumer:
    if compacted.topic.name != history.topic.name:
        raise ConfigError(f"{compacted.path} and {history.path} follow different changelogs")

    def transform(batch: BatchInput) -> dict[str, DataFrame]:
        return {**compacted.transform(batch), **history.transform(batch)}

    return Consumer(
        name=f"tables.{compacted.name}",
        topics=(compacted.topic.name,),
        outputs=(compacted.output, history.output),
        transform=transform,
        max_records_per_batch=min(compacted.max_records_per_batch,
                                  history.max_records_per_batch),
    )


def captured_source(
    server_name: str,
    tables: tuple[SourceTable, ...],
    *,
    partitions: int = 4,
    merge_on_read: Collection[str] = (),
) -> CapturedSource:
    """The changelogs, compacted and history tables of `tables`; the compacted tables named in
    `merge_on_read` are merge-on-read (`lakelog.cdc.compacted`), the rest copy-on-write."""
    unknown = set(merge_on_read) - {t.name for t in tables}
    if unknown:
        raise ConfigError(f"merge-on-read tables {sorted(unknown)} are not captured tables of "
                          f"{server_name}")
    changelogs = {
        t.topic: changelog_topic(t.name, t.spark_schema(), t.primary_key, partitions=partitions)
        for t in tables
    }
    return CapturedSource(
        server_name,
        tables,
        changelogs,
        compacted={t.name: CompactedTable(t.name, changelogs[t.topic], t.spark_schema(),
                                          t.primary_key, merge_on_read=t.name in merge_on_read)
                   for t in tables},
        history={t.name: HistoryTable(t.name, changelogs[t.topic], t.spark_schema(),
                                      t.primary_key) for t in tables},
    )
