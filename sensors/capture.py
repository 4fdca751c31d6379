"""The capture sensor: changes at a source database not landed yet become a capture run."""

from datetime import datetime, timezone
from typing import TYPE_CHECKING

import dagster as dg

from lakelog.assets.naming import op_name
from lakelog.cdc import SourceTable
from lakelog.cdc.lag import capture_lag
from lakelog.errors import LakelogError
from lakelog.resources import LakeResource, SourceResource

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )


def capture_sensor(
    server_name: str, tables: tuple[SourceTable, ...], job: "UnresolvedAssetJobDefinition",
    *, minimum_interval_seconds: int = 30,
) -> dg.SensorDefinition:
    """Requests `job` when the source has changes after the landed position (or no snapshot).

    It only peeks: a sensor never lands changes or alters the source. The cursor is the landed
    position a run was requested for, so a queued run is not requested again; the run key is
    the server and that position.
    """

    @dg.sensor(
        name=op_name("capture", server_name),
        job=job,
        minimum_interval_seconds=minimum_interval_seconds,
        description=f"Requests a capture of {server_name} when it has changes not landed yet.",
    )
    def _capture(
        context: dg.SensorEvaluationContext, lake: LakeResource, source: SourceResource
    ) -> dg.SensorResult:
        root = lake.resolved_root()
        try:
            behind = capture_lag(source.open(server_name, tables, root=root), root,
                                 now=datetime.now(timezone.utc))
        except LakelogError as exc:
            return dg.SensorResult(skip_reason=f"source {server_name} unavailable: {exc}")
        if not behind.pending:
            return dg.SensorResult(skip_reason=f"{server_name} is captured up to its head")
        at = "snapshot" if behind.position is None else str(behind.position)
        if context.cursor == at:
            return dg.SensorResult(skip_reason="a capture was already requested from here")
        return dg.SensorResult(
            run_requests=[dg.RunRequest(run_key=f"{server_name}:{at}")], cursor=at
        )

    return _capture
