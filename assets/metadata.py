"""Metadata operators look at: offsets and lag per log partition, as Dagster tables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg

from lakelog.consumers import PartitionLag
from lakelog.log import PartitionState
from lakelog.retention import RetentionResult

PARTITION_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("partition", "int", description="log partition"),
        dg.TableColumn("start_offset", "int", description="first offset still retained"),
        dg.TableColumn("head", "int", description="next offset to be assigned"),
        dg.TableColumn("records", "int"),
        dg.TableColumn("bytes", "int"),
    ]
)

LAG_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("topic", "string"),
        dg.TableColumn("partition", "int", description="log partition"),
        dg.TableColumn("committed", "int", description="next offset the consumer reads"),
        dg.TableColumn("head", "int"),
        dg.TableColumn("lag", "int"),
    ]
)


def partition_table(states: Mapping[int, PartitionState]) -> dg.TableMetadataValue:
    return dg.MetadataValue.table(
        records=[
            dg.TableRecord(
                {
                    "partition": s.partition,
                    "start_offset": s.start_offset,
                    "head": s.head,
                    "records": s.records,
                    "bytes": s.bytes,
                }
            )
            for _, s in sorted(states.items())
        ],
        schema=PARTITION_SCHEMA,
    )


def lag_table(lags: Iterable[PartitionLag]) -> dg.TableMetadataValue:
    return dg.MetadataValue.table(
        records=[
            dg.TableRecord(
                {
                    "topic": x.topic,
                    "partition": x.partition,
                    "committed": x.committed,
                    "head": x.head,
                    "lag": x.lag,
                }
            )
            for x in lags
        ],
        schema=LAG_SCHEMA,
    )


def retention_metadata(result: RetentionResult) -> dict[str, Any]:
    return {
        "removed_files": result.removed_files,
        "removed_records": result.removed_records,
        "removed_bytes": result.removed_bytes,
        "vacuumed_files": result.vacuumed,
        "start_offsets": {str(p): o for p, o in sorted(result.start_offsets.items())},
    }
