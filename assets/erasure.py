"""Right to erasure in Dagster: the ``_erasures`` record as an asset, the ``erase_subject`` job
that adds to it (the subject as run config), and the check that no table holds an erased
subject — found by the record's hashes, so the check needs no personal data."""

from datetime import datetime, timezone

import dagster as dg
from pydantic import Field

from lakelog.assets.errors import engine_errors
from lakelog.erasure import erase_subject, find_erased
from lakelog.erasure.record import PATH
from lakelog.pipeline import Pipeline
from lakelog.resources import LakeResource

ERASURES = dg.AssetKey(PATH)


class EraseConfig(dg.Config):
    subject: str = Field(description="The data subject's identifier (a user id, a key), as "
                         "the pipeline's subject columns hold it.")


def erasure_asset(pipeline: Pipeline) -> dg.AssetsDefinition:
    """Materializing ``_erasures`` erases the configured subject and appends its record."""

    @dg.asset(
        key=ERASURES,
        group_name="erasure",
        kinds={"spark", "delta"},
        description="The erasure record: per erasure, the tables, landing files and consumers "
        "it changed, with the subject's salted hash, never the subject. Materialize it (job "
        f"erase_subject) with the subject as config to erase one; subject columns: "
        f"{', '.join(pipeline.subject_columns)}.",
    )
    def _erase(context: dg.AssetExecutionContext, config: EraseConfig,
               lake: LakeResource) -> dg.MaterializeResult:
        with engine_errors():
            done = erase_subject(lake.open(), pipeline, config.subject,
                                 now=datetime.now(timezone.utc))
        context.log.info(f"erasure {done.id}: {done.rows} rows from {len(done.tables)} tables; "
                         f"rebuilt {', '.join(done.rebuilt) or 'no consumer'}")
        return dg.MaterializeResult(metadata={
            "erasure_id": done.id,
            "subject_hash": done.subject_hash,
            "rows_erased": done.rows,
            "tables": dg.MetadataValue.md("\n".join(
                ["| table | rows | versions |", "| --- | --- | --- |"]
                + [f"| {t.path} | {t.rows} | {t.version_before} → {t.version_after} |"
                   for t in done.tables])),
            "landing_lines_erased": sum(f.lines for f in done.landing),
            "consumers_rebuilt": list(done.rebuilt),
            "consumers_kept": {c: why for c, why in done.kept},
            "files_purged": done.purged,
        })

    return _erase


def erasure_check(pipeline: Pipeline) -> dg.AssetChecksDefinition:
    """After every erasure (and whenever run), no table holds a value that hashes to an erased
    subject: the erasure held, and no later record brought the subject back."""

    @dg.asset_check(asset=ERASURES, name="no_erased_subject", blocking=False,
                    description="No table holds a subject column value whose salted hash is an "
                    "erased subject's.")
    def _check(lake: LakeResource) -> dg.AssetCheckResult:
        with engine_errors():
            found = find_erased(lake.open(), pipeline.subject_columns)
        return dg.AssetCheckResult(
            passed=not found,
            metadata={"tables_holding_erased_subjects": {p: ids for p, ids in found.items()}},
        )

    return _check


#: Launch it with the subject as config; the pipeline's next run recomputes what it rebuilt.
ERASE_JOB = dg.define_asset_job(
    "erase_subject", selection=dg.AssetSelection.assets(ERASURES),
    description="Erase one data subject: launch it with config "
    "ops: {_erasures: {config: {subject: <id>}}}; the pipeline's next run recomputes "
    "what the erasure rebuilt.")
