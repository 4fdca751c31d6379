"""A table's change stream in Dagster: the relay that publishes its changes to a topic."""

from datetime import datetime, timezone

import dagster as dg

from lakelog.assets.errors import engine_errors
from lakelog.assets.naming import output_key, topic_key
from lakelog.cdc.change_streams import ChangeStream, publish_changes
from lakelog.resources import LakeResource


def change_stream_asset(stream: ChangeStream) -> dg.AssetsDefinition:
    """``log/changes.<table>``: the table's changes since the last publication, published once
    each (the relay's cursor, a table version, commits with the append)."""

    @dg.asset(
        key=topic_key(stream.topic),
        deps=[output_key(stream.table)],
        group_name="log",
        kinds={"spark", "delta"},
        description=f"The change stream of {stream.path}: Debezium envelopes (before, after, "
        "op, source with the table version), published exactly once per table version.",
    )
    def _publish(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
        with engine_errors():
            result = publish_changes(lake.open(), stream, now=datetime.now(timezone.utc))
        what = "a snapshot of" if result.snapshot else "changes of"
        context.log.info(f"published {result.changes} {what} {stream.path} versions "
                         f"{result.versions}")
        return dg.MaterializeResult(metadata={
            "changes_published": result.changes,
            "table_versions": list(result.versions) if result.versions else [],
            "snapshot": result.snapshot,
        })

    return _publish
