"""Data-quality asset checks: Great Expectations suites on the tables lakelog writes.

Topics, compacted tables and history tables get blocking checks built from their declarations
(`lakelog.quality.suites`): when one fails, assets downstream of the table in the same run are
not materialized. The checks validate the table as of its newest version — what the run that
materialized it just wrote. A topic's check validates only the rows appended since the version
its latest execution passed at (`lakelog.quality.scope`), so its cost follows the new records,
not the log's history. Great Expectations is imported inside the check functions: its import
takes seconds (2-5 s on 2 cores), which loading the code location should not pay, nor a run's
critical path: the ingest step starts importing it in the background (`preload_checks`), while
it waits on Spark, when its run holds a check that Great Expectations evaluates and there is
something to validate: at the step's start when the run checks compacted or history tables
(validated whole every run), else once an ingest plans a batch of new files. A check with nothing to
validate (a topic with no rows added since it passed, a model whose rows did not change) does
not import it.
"""

import importlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dagster as dg
# Great Expectations imports SQLAlchemy's ORM, which registers its inspector for every object
# before its own `orm.exc` module is complete. Imported on the preload thread, that left a
# window in which a step thread's Dagster storage query (SQLAlchemy coerces each element
# through that inspector) failed with "partially initialized module 'sqlalchemy.orm.exc'".
# Importing the ORM here, on the thread that loads the code location before any step runs,
# closes the window, for about 50 ms of load time.
import sqlalchemy.orm  # noqa: F401

from lakelog.assets.errors import engine_errors
from lakelog.assets.executor import VALIDATION_TAG
from lakelog.assets.naming import output_key, topic_key
from lakelog.cdc.captured import CapturedSource
from lakelog.cdc.compacted import CompactedTable
from lakelog.cdc.history import HistoryTable
from lakelog.lake import Lake, Snapshot
from lakelog.log.topics import Topic
from lakelog.quality import names
from lakelog.quality.outcomes import SuiteOutcome
from lakelog.resources import LakeResource

if TYPE_CHECKING:
    from lakelog.quality.scope import Scope
    from lakelog.quality.suites import Suite


_PRELOAD: list[threading.Thread] = []
_PRELOADING = threading.Lock()  # the topics of one ingest step plan their batches on threads
#: Dagster's step priority tag: among the steps ready in a run, higher goes first.
PRIORITY_TAG = "dagster/priority"


def checks_follow(context: dg.AssetExecutionContext) -> frozenset[str]:
    """The names of the run's checks that Great Expectations evaluates: tables' blocking checks
    (steps of their own) and SQL models' warnings (part of the models' steps). `lakelog demo`'s
    runs but its last, and a materialization of a topic without its checks, hold none."""
    checks = context.job_def.asset_layer.asset_graph.asset_check_keys  # the run's subset
    return frozenset(key.name for key in checks if key.name in names.GX_CHECKS)


def preload_checks() -> threading.Thread:
    """Import what the checks run on (Great Expectations) in a background thread, once per
    process; the check step's own import then finds it done, or waits for it (Python's import
    lock). A failure there is left for the check step's import to raise."""
    with _PRELOADING:
        if _PRELOAD:
            return _PRELOAD[0]
        thread = threading.Thread(target=importlib.import_module,
                                  args=("lakelog.quality.validate",), name="lakelog-preload-gx",
                                  daemon=True)
        thread.start()
        _PRELOAD.append(thread)
    return _PRELOAD[0]


def check_result(outcome: SuiteOutcome, *, asset_key: dg.AssetKey | None = None,
                 version: int | None = None, validated: str | None = None
                 ) -> dg.AssetCheckResult:
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
    if validated is not None:
        metadata["validated"] = validated
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


@dataclass(frozen=True)
class TableCheck:
    """One blocking suite on one table; a topic's validates what was appended since it passed."""

    key: dg.AssetKey
    path: str
    name: str
    description: str
    suite: "Callable[[], Suite]"
    topic: Topic | None = None

    @property
    def check_key(self) -> dg.AssetCheckKey:
        return dg.AssetCheckKey(self.key, self.name)

    def scope(self, lake: Lake, snapshot: Snapshot, instance: dg.DagsterInstance) -> "Scope":
        from lakelog.quality.scope import read_scope, topic_scope

        if self.topic is None:
            return read_scope(lake, snapshot, self.suite(), "the whole table")
        return topic_scope(lake, self.topic, snapshot, passed=passed_version(instance, self))


def passed_version(instance: dg.DagsterInstance, check: TableCheck) -> int | None:
    """The table version the check's latest evaluation validated and passed, if it did.

    Executions without an evaluation are passed over: the one this run planned, and those of
    runs still under way or ended before the check ran.
    """
    history = instance.event_log_storage.get_asset_check_execution_history(
        check.check_key, limit=20)
    for record in history:  # newest first
        evaluation = record.event.asset_check_evaluation if record.event else None
        if evaluation is None:
            continue
        version = evaluation.metadata.get("table_version")
        passed = evaluation.passed and isinstance(version, dg.IntMetadataValue)
        return version.value if passed else None
    return None


def table_checks(checks: Sequence[TableCheck], name: str | None = None) -> dg.AssetChecksDefinition:
    """`checks` as one step that evaluates the selected ones, one after another.

    A check that raises does not keep the others from being evaluated; the step fails after
    them. `name` defaults to Dagster's own name for a single check. The step goes first among
    the steps ready in a run (what it gates waits for it), and one validation step runs at a
    time (`VALIDATION_TAG`).
    """
    by_key = {c.check_key: c for c in checks}
    if name is None:
        [only] = checks
        name = f"{only.key.to_python_identifier()}_{only.name}"

    @dg.multi_asset_check(
        specs=[dg.AssetCheckSpec(c.name, asset=c.key, blocking=True, description=c.description)
               for c in checks],
        name=name,
        can_subset=True,
        op_tags={VALIDATION_TAG: "great_expectations", PRIORITY_TAG: "1"},
    )
    def _checks(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> Iterator:
        the_lake, failed = lake.open(), None
        for check in (c for key, c in by_key.items() if key in context.selected_asset_check_keys):
            if not the_lake.exists(check.path):
                yield dg.AssetCheckResult(asset_key=check.key, check_name=check.name, passed=True,
                                          description=f"{check.path} does not exist yet")
                continue
            try:
                with engine_errors():
                    snapshot = the_lake.snapshot(check.path)
                    scope = check.scope(the_lake, snapshot, context.instance)
                    outcome = None if scope.rows is None else _validate(scope)
            except Exception as exc:  # the step fails once the other checks have run
                failed = failed or exc
                continue
            if outcome is None:
                yield dg.AssetCheckResult(
                    asset_key=check.key, check_name=check.name, passed=True,
                    description=f"nothing to validate: {scope.description}",
                    metadata={"table_version": snapshot.version, "validated": scope.description})
                continue
            yield check_result(outcome, asset_key=check.key, version=snapshot.version,
                               validated=scope.description)
        if failed is not None:
            raise failed

    return _checks


def _validate(scope: "Scope") -> SuiteOutcome:
    """The scope's rows validated by its suite. Great Expectations is imported here, when there
    are rows to validate: a check with nothing new does not pay its import."""
    from lakelog.quality.validate import validate

    assert scope.rows is not None and scope.suite is not None
    return validate(scope.rows, [scope.suite], cache=not scope.small)[0]


def _topic_check(topic: Topic) -> TableCheck:
    def suite() -> "Suite":
        from lakelog.quality.suites import topic_suite

        return topic_suite(topic)

    return TableCheck(
        topic_key(topic), topic.path, names.TOPIC_CHECK,
        "Blocking: schema, non-null key and event id, offsets unique per log partition"
        + (" (compacted topic: gaps allowed)." if topic.compaction
           else " and contiguous. Validates the records appended since it last passed."),
        suite, topic,
    )


def _compacted_check(table: CompactedTable) -> TableCheck:
    def suite() -> "Suite":
        from lakelog.quality.suites import compacted_suite

        return compacted_suite(table)

    return TableCheck(
        output_key(table.output), table.path, names.COMPACTED_CHECK,
        f"Blocking: primary key ({', '.join(table.key)}) unique.", suite,
    )


def _history_check(table: HistoryTable) -> TableCheck:
    def suite() -> "Suite":
        from lakelog.quality.suites import history_suite

        return history_suite(table)

    return TableCheck(
        output_key(table.output), table.path, names.HISTORY_CHECK,
        "Blocking: one current row per key, validity intervals not overlapping.", suite,
    )


def topic_check(topic: Topic) -> dg.AssetChecksDefinition:
    """The blocking check of one topic, as a step of its own."""
    return table_checks([_topic_check(topic)])


def quality_checks(
    topics: Mapping[str, Topic], sources: Sequence[CapturedSource] = ()
) -> list[dg.AssetChecksDefinition]:
    """The blocking checks of every topic in `topics` and of every source's changelog topics,
    a step per topic, and of its compacted and history tables (one step, `table_checks`).

    A step per topic: a topic's consumers start once its own check has passed, beside the
    checks of the other topics, and a check that raises stops only its topic's consumers."""
    changelogs = {n: t for s in sources for n, t in s.changelogs.items()}
    tables = [
        *(_compacted_check(t) for s in sources for t in s.compacted.values()),
        *(_history_check(t) for s in sources for t in s.history.values()),
    ]
    steps = [topic_check(t) for t in {**topics, **changelogs}.values()]
    if tables:
        steps.append(table_checks(tables, "table_checks"))
    return steps
