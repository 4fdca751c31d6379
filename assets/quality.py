"""Data-quality asset checks: Great Expectations suites on the tables lakelog writes.

Topics, compacted tables and history tables get blocking checks built from their declarations
(`lakelog.quality.suites`): when one fails, assets downstream of the table in the same run are
not materialized. The checks validate the table as of its newest version — what the run that
materialized it just wrote. Great Expectations is imported inside the check functions: its
import takes seconds, which loading the code location should not pay.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import dagster as dg

from lakelog.assets.errors import engine_errors
from lakelog.assets.naming import output_key, topic_key
from lakelog.captured import CapturedSource
from lakelog.compacted import CompactedTable
from lakelog.history import HistoryTable
from lakelog.quality import names
from lakelog.quality.outcomes import SuiteOutcome
from lakelog.resources import LakeResource
from lakelog.topics import Topic

if TYPE_CHECKING:
    from lakelog.quality.suites import Suite


def check_result(outcome: SuiteOutcome, *, asset_key: dg.AssetKey | None = None,
                 version: int | None = None) -> dg.AssetCheckResult:
    """A suite's outcome as a Dagster check result, with GX's findings in its metadata."""
    failed = outcome.failures
    metadata = {
        "expectations": len(outcome.results),
        "failed_expectations": [f.expectation for f in failed],
        "unexpected_count": sum(f.unexpected_count or 0 for f in failed),
        "results": dg.MetadataValue.json([r.as_dict() for r in outcome.results]),
    }
    if version is not None:
        metadata["table_version"] = version
    if failed:
        lines = [f"{f.expectation} {f.arguments}: {f.unexpected_count} unexpected, "
                 f"observed {f.observed_value}, e.g. {list(f.unexpected_sample[:3])}"
                 + (f" ({f.error})" if f.error else "") for f in failed]
        description = "\n".join(lines)
    else:
        description = outcome.description
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=outcome.suite,
        passed=outcome.success,
        severity=dg.AssetCheckSeverity.ERROR if outcome.blocking else dg.AssetCheckSeverity.WARN,
        description=description,
        metadata=metadata,
    )


def _table_check(
    key: dg.AssetKey, path: str, name: str, description: str, suite: "Callable[[], Suite]"
) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=key, name=name, blocking=True, description=description)
    def _check(lake: LakeResource) -> dg.AssetCheckResult:
        from lakelog.quality.validate import validate

        the_lake = lake.open()
        if not the_lake.exists(path):
            return dg.AssetCheckResult(passed=True, description=f"{path} does not exist yet")
        with engine_errors():
            snapshot = the_lake.snapshot(path)
            [outcome] = validate(the_lake.read(snapshot), [suite()])
        return check_result(outcome, version=snapshot.version)

    return _check


def topic_check(topic: Topic) -> dg.AssetChecksDefinition:
    def suite() -> "Suite":
        from lakelog.quality.suites import topic_suite

        return topic_suite(topic)

    return _table_check(
        topic_key(topic), topic.path, names.TOPIC_CHECK,
        "Blocking: schema, non-null key and event id, offsets unique per log partition"
        + (" (compacted topic: gaps allowed)." if topic.compaction else " and contiguous."),
        suite,
    )


def compacted_check(table: CompactedTable) -> dg.AssetChecksDefinition:
    def suite() -> "Suite":
        from lakelog.quality.suites import compacted_suite

        return compacted_suite(table)

    return _table_check(
        output_key(table.output), table.path, names.COMPACTED_CHECK,
        f"Blocking: primary key ({', '.join(table.key)}) unique.", suite,
    )


def history_check(table: HistoryTable) -> dg.AssetChecksDefinition:
    def suite() -> "Suite":
        from lakelog.quality.suites import history_suite

        return history_suite(table)

    return _table_check(
        output_key(table.output), table.path, names.HISTORY_CHECK,
        "Blocking: one current row per key, validity intervals not overlapping.", suite,
    )


def quality_checks(
    topics: Mapping[str, Topic], sources: Sequence[CapturedSource] = ()
) -> list[dg.AssetChecksDefinition]:
    """The blocking checks of every topic in `topics`, and of every source's changelog topics,
    compacted tables and history tables."""
    changelogs = {n: t for s in sources for n, t in s.changelogs.items()}
    return [
        *(topic_check(t) for t in {**topics, **changelogs}.values()),
        *(compacted_check(t) for s in sources for t in s.compacted.values()),
        *(history_check(t) for s in sources for t in s.history.values()),
    ]
