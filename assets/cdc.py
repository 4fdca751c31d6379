"""CDC assets: the capture of a source database, and the check that its tables match it."""

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Optional

import dagster as dg
from pydantic import Field

from lakelog.assets.errors import engine_errors
from lakelog.assets.naming import capture_key, capture_pool, output_key
from lakelog.cdc import SourceTable, checkpoint
from lakelog.cdc.capture import capture_until_caught_up
from lakelog.cdc.compacted import CompactedTable
from lakelog.cdc.lag import capture_lag
from lakelog.cdc.reconcile import reconcile
from lakelog.consumers import Consumer, lag
from lakelog.log import landing
from lakelog.log.topics import Topic
from lakelog.resources import LakeResource, SourceResource

COUNTS_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("table", "string"),
        dg.TableColumn("op", "string", description="c create, u update, d delete, r snapshot"),
        dg.TableColumn("events", "int"),
    ]
)


class CaptureConfig(dg.Config):
    max_changes: int = Field(default=10_000, description="Change events per landing batch.")
    max_batches: Optional[int] = Field(
        default=None, description="Stop after this many batches (default: until caught up)."
    )


def capture_asset(server_name: str, tables: tuple[SourceTable, ...]) -> dg.AssetsDefinition:
    """Landing files of the changelogs ``cdc.<table>``: snapshot first, then changes."""

    @dg.asset(
        key=capture_key(server_name),
        group_name="cdc",
        kinds={"python"},
        description=f"Change data capture of {server_name} ({', '.join(t.name for t in tables)})"
        " into Debezium-format landing files.",
        pool=capture_pool(server_name),
    )
    def _capture(
        context: dg.AssetExecutionContext, config: CaptureConfig, lake: LakeResource,
        source: SourceResource,
    ) -> dg.MaterializeResult:
        root = lake.resolved_root()
        now = datetime.now(timezone.utc)
        with engine_errors():
            src = source.open(server_name, tables, root=root)
            done = capture_until_caught_up(
                src, root, now=now, max_changes=config.max_changes, max_batches=config.max_batches
            )
            behind = capture_lag(src, root, now=datetime.now(timezone.utc))
        counts: dict[tuple[str, str], int] = {}
        for result in done:
            for table, ops in result.counts.items():
                for op, n in ops.items():
                    counts[(table, op)] = counts.get((table, op), 0) + n
        context.log.info(f"capture of {server_name}: {len(done)} calls, {sum(counts.values())} events")
        return dg.MaterializeResult(
            metadata={
                "connector": src.connector,
                "position": behind.position,
                "snapshot_taken": any(r.snapshot_taken for r in done),
                "changes": sum(r.changes for r in done),
                "snapshot_rows": sum(r.snapshot_rows for r in done),
                "files": sum(len(r.files) for r in done),
                "events": dg.MetadataValue.table(
                    [dg.TableRecord({"table": t, "op": op, "events": n})
                     for (t, op), n in sorted(counts.items())],
                    schema=COUNTS_SCHEMA,
                ),
                "lag_positions": behind.behind,
                "lag_seconds": round(behind.seconds, 3),
            }
        )

    return _capture


def reconciliation_check(
    server_name: str,
    tables: tuple[SourceTable, ...],
    table: SourceTable,
    compacted: CompactedTable,
    writer: Consumer,
    topics: Mapping[str, Topic],
) -> dg.AssetChecksDefinition:
    """Fails when the compacted table differs from the source at the captured position.

    When the comparison cannot be exact — the source changed after the capture, or the table
    has not yet applied everything captured — it warns instead, saying what to run.
    `writer` is the consumer that maintains `compacted`.
    """

    @dg.asset_check(
        asset=output_key(compacted.output),
        name="matches_source",
        description=f"{compacted.path} equals {server_name}.{table.name} (row count and an "
        "order-independent hash of the rows) at the captured position.",
    )
    def _matches_source(lake: LakeResource, source: SourceResource) -> dg.AssetCheckResult:
        root = lake.resolved_root()
        the_lake = lake.open()
        now = datetime.now(timezone.utc)
        with engine_errors():
            src = source.open(server_name, tables, root=root)
            saved = checkpoint.load(root, server_name, src.connector)
            waiting = [] if saved is None else [
                t for t in writer.topics
                if landing.pending_files(the_lake, landing.load_manifest(the_lake, t))
            ]
            behind = 0 if saved is None else sum(
                x.lag for x in lag(the_lake, writer, topics)
            )
            if saved is None or waiting or behind:
                return dg.AssetCheckResult(
                    passed=False, severity=dg.AssetCheckSeverity.WARN,
                    description="not comparable yet: "
                    + ("nothing captured" if saved is None else
                       f"{len(waiting)} changelog(s) with landing files to ingest, "
                       f"{behind} changelog records to apply"),
                )
            result = reconcile(lake.spark.session(), the_lake, compacted, src, table,
                               position=saved.position, now=now)
        metadata = {
            "position": result.position, "lake_rows": result.lake_rows,
            "source_rows": result.source_rows, "lake_hash": str(result.lake_hash),
            "source_hash": str(result.source_hash), "missing_keys": list(result.missing),
            "extra_keys": list(result.extra), "different_keys": list(result.different),
        }
        if result.source_moved:
            return dg.AssetCheckResult(
                passed=False, severity=dg.AssetCheckSeverity.WARN, metadata=metadata,
                description="the source changed after the captured position: capture and apply, "
                "then check again",
            )
        return dg.AssetCheckResult(passed=result.matches, metadata=metadata)

    return _matches_source
