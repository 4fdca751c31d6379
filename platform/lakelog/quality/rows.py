"""`ExpectNoUnexpectedRows`: GX's `UnexpectedRowsExpectation`, counted alone when only success
is asked for.

GX's `UnexpectedRowsExpectation` depends on two metrics whatever the result format: the rows the
query finds (up to 200) and their count, i.e. the query runs twice. On Spark each run is a temporary
view, an eager `spark.sql` and a collect — round trips that over Spark Connect cost a topic's check
about half of its time. This one asks for the count alone under ``BOOLEAN_ONLY``, and for both
otherwise; `lakelog.quality.validate` validates with ``BOOLEAN_ONLY`` first and again in full only
what failed, so the rows are fetched only when there are some to show.
"""

from __future__ import annotations

from typing import Any

from lakelog.quality.gx import gxe

ROWS_METRIC = "unexpected_rows_query.table"
COUNT_METRIC = "unexpected_rows_query.row_count"


class ExpectNoUnexpectedRows(gxe.UnexpectedRowsExpectation):
    """The query over ``{batch}`` returns no rows (GX type ``expect_no_unexpected_rows``)."""

    def get_validation_dependencies(self, execution_engine: Any = None,
                                    runtime_configuration: dict | None = None) -> Any:
        found = super().get_validation_dependencies(
            execution_engine=execution_engine, runtime_configuration=runtime_configuration)
        if found.result_format.get("result_format") == "BOOLEAN_ONLY":
            found.remove_metric_configuration(ROWS_METRIC)
        return found

    def _validate(self, metrics: dict, runtime_configuration: dict | None = None,
                  execution_engine: Any = None) -> Any:
        if ROWS_METRIC not in metrics:
            return {"success": metrics[COUNT_METRIC] == 0}
        return super()._validate(metrics, runtime_configuration, execution_engine)
