"""Metadata operators look at: offsets and lag per log partition, as Dagster tables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg

from lakelog.consumers import PartitionLag
from lakelog.log.offsets import PartitionState
from lakelog.log.retention import RetentionResult

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


def _table(rows: Iterable[object], schema: dg.TableSchema) -> dg.TableMetadataValue:
    """A Dagster table of `rows`, each column read from the attribute of the same name."""
    return dg.MetadataValue.table(
        records=[dg.TableRecord({c.name: getattr(r, c.name) for c in schema.columns}) for r in rows],
        schema=schema,
    )


def partition_table(states: Mapping[int, PartitionState]) -> dg.TableMetadataValue:
    return _table((s for _, s in sorted(states.items())), PARTITION_SCHEMA)


def lag_table(lags: Iterable[PartitionLag]) -> dg.TableMetadataValue:
    return _table(lags, LAG_SCHEMA)


def retention_metadata(result: RetentionResult) -> dict[str, Any]:
    return {
        "removed_files": result.removed_files,
        "removed_records": result.removed_records,
        "removed_bytes": result.removed_bytes,
        "vacuumed_files": result.vacuumed,
        "start_offsets": {str(p): o for p, o in sorted(result.start_offsets.items())},
    }
