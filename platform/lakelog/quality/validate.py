"""Running suites on a Spark DataFrame with an ephemeral Great Expectations context.

All suites over one frame run as one GX validation of the cached frame (two, in fact: GX returns
the rows an `UnexpectedRowsExpectation` found only in its COMPLETE result format, which for the
other expectations would collect every unexpected value). Results are split back per suite.

The other expectations are validated for success alone first (GX's BOOLEAN_ONLY: their
aggregates in a few Spark jobs, where counting and sampling unexpected values costs a job per
expectation); only those that failed are validated again for their counts and samples. A topic's
suite that passes, as nearly all do, took 15 Spark jobs instead of 27 when measured.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame

from lakelog.quality.gx import (
    DataContextConfig,
    Expectation,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
    gx,
    gxe,
)
from lakelog.quality.outcomes import SAMPLE, ExpectationOutcome, SuiteOutcome, plain
from lakelog.quality.suites import Suite

SUITE_META = "lakelog_suite"
#: Expectation arguments that describe how GX ran, not what was expected.
RUN_ARGUMENTS = ("batch_id", "result_format")


def _context() -> Any:
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def _tagged(suite: Suite, index: int) -> list[Expectation]:
    meta = {SUITE_META: index}
    return [e.copy(update={"meta": {**(e.meta or {}), **meta}, "id": None})
            for e in suite.expectations]


def _outcome(result: Any) -> ExpectationOutcome:
    config = result.expectation_config
    found = dict(result.result or {})
    error = None
    info = result.exception_info or {}
    if info.get("raised_exception"):
        error = info.get("exception_message") or "the expectation raised an error"
    if config.type == "unexpected_rows_expectation":
        count = found.get("observed_value")
        sample = (found.get("details") or {}).get("unexpected_rows") or []
    else:
        count = found.get("unexpected_count")
        sample = found.get("partial_unexpected_index_list") or found.get(
            "partial_unexpected_list") or []
    return ExpectationOutcome(
        expectation=config.type,
        arguments=plain({k: v for k, v in config.kwargs.items() if k not in RUN_ARGUMENTS}),
        success=bool(result.success),
        observed_value=plain(found.get("observed_value")),
        unexpected_count=count,
        unexpected_sample=tuple(plain(sample[:SAMPLE])),
        description=config.description,
        error=error,
    )


def _key(config: Any) -> str:
    """What identifies an expectation in its results: type, arguments and suite."""
    arguments = {k: v for k, v in config.kwargs.items() if k not in RUN_ARGUMENTS}
    return json.dumps([config.type, plain(arguments), config.meta[SUITE_META]], sort_keys=True)


def validate(df: DataFrame, suites: Sequence[Suite]) -> list[SuiteOutcome]:
    """Validate `df` against `suites`; one outcome per suite, in order."""
    tagged = [(i, e) for i, s in enumerate(suites) for e in _tagged(s, i)]
    if not tagged:
        return [SuiteOutcome(s.name, s.blocking, (), s.description) for s in suites]
    index = [c for c in dict.fromkeys(c for s in suites for c in s.index_columns)
             if c in df.columns]
    cached = df.persist()
    try:
        batch = (
            _context().data_sources.add_spark(name="lakelog")
            .add_dataframe_asset(name="frame")
            .add_batch_definition_whole_dataframe("whole")
            .get_batch(batch_parameters={"dataframe": cached})
        )
        rows = [e for _, e in tagged if isinstance(e, gxe.UnexpectedRowsExpectation)]
        others = [e for _, e in tagged if not isinstance(e, gxe.UnexpectedRowsExpectation)]

        def run(expectations: list[Expectation], result_format: dict[str, Any]) -> list[Any]:
            if not expectations:
                return []
            suite = gx.ExpectationSuite(name="lakelog", expectations=expectations)
            return list(batch.validate(suite, result_format=result_format).results)

        results = run(others, {"result_format": "BOOLEAN_ONLY"})
        failed = {_key(r.expectation_config) for r in results if not r.success}
        if failed:
            results = [r for r in results if r.success] + run(
                [e for e in others if _key(e.configuration) in failed],
                {"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE,
                 **({"unexpected_index_column_names": index} if index else {})})
        results += run(rows, {"result_format": "COMPLETE"})
    finally:
        cached.unpersist()
    found: dict[int, list[ExpectationOutcome]] = {i: [] for i in range(len(suites))}
    for result in results:
        found[result.expectation_config.meta[SUITE_META]].append(_outcome(result))
    return [
        SuiteOutcome(s.name, s.blocking, tuple(found[i]), s.description)
        for i, s in enumerate(suites)
    ]
