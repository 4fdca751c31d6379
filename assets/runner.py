"""The runner: catch a pipeline's live nodes up once, as one run of its Dagster `pipeline` job.

`lakelog run` and `lakelog demo` do not call the engine themselves: they execute the very job
whose runs the pipeline sensor requests — captures, ingest, consumers, the orders relay and the
SQL models, in dependency order — so the CLI and Dagster cannot drift apart. The run executes
in this process, on the job's own executor (`lakelog.assets.executor`: the steps share one
Spark session, two at a time), and is recorded on a Dagster instance, so the UI shows each asset
materialized, with its metadata and lineage:

- with ``$DAGSTER_HOME`` set, the instance there — the one `dagster dev` uses;
- else a persistent instance in ``<lake root>/dagster`` beside the tables it describes
  (``DAGSTER_HOME=<lake root>/dagster dagster dev`` shows it), or an ephemeral one when the
  lake is on an object store.

A persistent instance lakelog makes (beside the lake, or at a ``$DAGSTER_HOME`` that does not
exist yet) gets lakelog's `dagster.yaml` (`lakelog.assets.instance_file`: deploy/dagster.yaml on
SQLite), so `dagster dev` over it forks its runs, launches them within a second and queues the
pipeline's next run behind the one in progress. The `dagster.yaml` lakelog wrote before (its
storage alone) is replaced; another one, and a ``$DAGSTER_HOME`` that exists, keep what they
have.

A run holds the pipeline sensor like any pipeline run (one at a time). Runs are tagged with the
runner's host and pid, so a run whose process was killed, and which therefore never ends by
itself, is reported failed by the next runner instead of holding the sensor forever.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dagster as dg
import yaml
from dagster._core.instance.ref import InstanceRef

from lakelog.assets.location import build_location
from lakelog.assets.executor import execute_here
from lakelog.assets.gates import verdicts
from lakelog.assets.instance_file import ensure_instance_yaml
from lakelog.assets.instance_storage import FROM_DAGSTER_HOME, storage_config
from lakelog.assets.runner_tags import RUNNER_HOST, runner_gone, runner_tags
from lakelog.assets.naming import CATCH_UP_TAG, capture_key, output_key
from lakelog.assets.pipeline import PIPELINE
from lakelog.consumers import Consumer
from lakelog.lake import Lake
from lakelog.pipeline import Pipeline

INSTANCE_VARIABLE = "DAGSTER_HOME"
#: Step events and errors stay in the instance's event log; the caller reports the failures.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
#: The `dagster.yaml` keys that choose where an instance is stored.
STORAGE_KEYS = {"storage", "run_storage", "event_log_storage", "schedule_storage"}
_UNFINISHED = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED]


def open_instance(lake_root: str, environ: Mapping[str, str]) -> tuple[dg.DagsterInstance, str]:
    """The instance runs are recorded on (see the module docstring), and where it is.

    A persistent one is stored in Dagster's SQLite files through
    `lakelog.assets.instance_storage.SqliteStorage` (it stores a run's events faster than
    Dagster's own classes; `dagster dev` reads the same files either way) unless its
    `dagster.yaml` names another storage. The file written beside a lake names it relative to
    ``$DAGSTER_HOME``, so ``DAGSTER_HOME=<lake root>/dagster dagster dev`` uses it too.
    """
    home = environ.get(INSTANCE_VARIABLE)
    if home:
        made = not Path(home).exists()
        Path(home).mkdir(parents=True, exist_ok=True)
        ensure_instance_yaml(Path(home), lakelogs=made)
        return _persistent(home), home
    if "://" in lake_root:
        return dg.DagsterInstance.ephemeral(), "ephemeral (set $DAGSTER_HOME to keep runs)"
    home = Path(lake_root, "dagster").resolve()
    ensure_instance_yaml(home, lakelogs=True)
    return _persistent(str(home)), str(home)


def _persistent(home: str) -> dg.DagsterInstance:
    path = Path(home, "dagster.yaml")
    config = (yaml.safe_load(path.read_text()) if path.exists() else None) or {}
    if set(config) & STORAGE_KEYS and config.get("storage") != storage_config(
            FROM_DAGSTER_HOME):
        return dg.DagsterInstance.from_config(home)
    overrides = {"storage": storage_config(os.path.abspath(home))}  # $DAGSTER_HOME may be unset
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(home, overrides=overrides))


@dataclass(frozen=True)
class Materialized:
    key: str
    metadata: Mapping[str, Any]


@dataclass(frozen=True)
class RunReport:
    """What one run did: its materializations (metadata as plain values), check verdicts, the
    failed steps, the models left out because an input does not exist yet, and the consumers a
    failed blocking check held back."""

    run_id: str
    success: bool
    selected: tuple[str, ...]
    materialized: tuple[Materialized, ...]
    checks: Mapping[str, bool]
    failures: tuple[str, ...]
    left_out: tuple[str, ...]
    seconds: float
    #: Consumer outputs that consumed nothing, and why (a failed blocking check upstream).
    blocked: Mapping[str, str]

    def of(self, key: str) -> list[Mapping[str, Any]]:
        """The metadata of each materialization of asset `key` (``log/orders``) in the run."""
        return [m.metadata for m in self.materialized if m.key == key]

    def total(self, field: str, keys: Iterable[str] | None = None) -> int:
        """The sum of a numeric metadata `field` over the materializations (of `keys`)."""
        chosen = None if keys is None else set(keys)
        return sum(int(m.metadata.get(field) or 0) for m in self.materialized
                   if chosen is None or m.key in chosen)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "success": self.success, "selected": list(self.selected),
            "materialized": [{"asset": m.key, "metadata": dict(m.metadata)}
                             for m in self.materialized],
            "checks": dict(self.checks), "failures": list(self.failures),
            "left_out": list(self.left_out), "blocked": dict(self.blocked),
            "seconds": round(self.seconds, 3),
        }


class Runner:
    """Runs of `pipeline`'s `pipeline` job with `resources` (``spark``, ``lake``, ``source``),
    recorded on `instance`. Build it once per process: the definitions are built here."""

    def __init__(
        self, pipeline: Pipeline, *, resources: Mapping[str, Any], instance: dg.DagsterInstance,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        location = build_location(pipeline, resources=resources)
        self.pipeline, self.instance, self.live = pipeline, instance, location.live
        self._defs = location.defs
        self._lake: Lake = resources["lake"].open()  # metadata only: Spark starts on first use
        self.lake_root = self._lake.root
        self._tags = {**(tags or {}), **runner_tags(), CATCH_UP_TAG: "true"}
        self._unchecked: dg.JobDefinition | None = None

    def capture_keys(self) -> set[dg.AssetKey]:
        """The capture assets of the pipeline's captured sources."""
        return {capture_key(s.server_name) for s in self.pipeline.sources}

    def output_keys(self, consumers: Iterable[Consumer]) -> set[dg.AssetKey]:
        return {output_key(o) for c in consumers for o in c.outputs}

    def model_keys(self) -> set[dg.AssetKey]:
        graph = self.pipeline.model_graph
        return set() if graph is None else {dg.AssetKey(m.path.split("/"))
                                            for m in graph.models.values()}

    def catch_up(
        self,
        *,
        only: Collection[dg.AssetKey] | None = None,
        leave_out: Collection[dg.AssetKey] = (),
        checks: bool = True,
        now: datetime | None = None,
    ) -> RunReport:
        """One run over `only` (default: every live asset) minus `leave_out` and everything
        downstream of it, without the models whose inputs exist nowhere yet; `checks=False`
        runs no check steps. As the pipeline sensor does, a consumer's blocking check that a
        run ended before evaluating is run again (its table is selected too, with its checks
        even without `checks`), so it does not keep the consumer waiting."""
        started = time.perf_counter()
        self._fail_abandoned_runs()
        chosen = set(self.live.keys if only is None else only)
        rechecks = self._rechecks(chosen)
        chosen |= rechecks
        if leave_out:
            chosen -= self.live.closure(leave_out)
        selected, left_out = self.live.runnable(chosen, self._lake.exists)
        checked = checks or bool(rechecks & selected)
        if checked:  # the checks of the selection, as the sensor requests them: no audits
            job = self._defs.resolve_job_def(PIPELINE).get_subset(
                asset_selection=set(selected),
                asset_check_selection=set(self.live.checks_of(selected)))
        else:
            job = self._job_without_checks().get_subset(asset_selection=set(selected))
        result = execute_here(
            job,
            instance=self.instance,
            partition_key=self.live.partition_key(selected, now or datetime.now(timezone.utc)),
            tags=self._tags,
            run_config=QUIET,
            raise_on_error=False,
        )
        return RunReport(
            run_id=result.run_id,
            success=result.success,
            selected=tuple(sorted(k.to_user_string() for k in selected)),
            materialized=tuple(
                Materialized(e.asset_key.to_user_string(), _plain(e.materialization.metadata))
                for e in result.get_asset_materialization_events()
            ),
            checks={f"{c.asset_key.to_user_string()}:{c.check_name}": c.passed
                    for c in result.get_asset_check_evaluations()},
            failures=tuple(_failure(e) for e in result.all_events if e.is_step_failure),
            blocked={e.asset_key.to_user_string(): str(_plain(meta)["blocked_because"])
                     for e in result.get_asset_observation_events()
                     if "blocked_because" in (
                         meta := e.asset_observation_data.asset_observation.metadata)},
            left_out=tuple(left_out),
            seconds=time.perf_counter() - started,
        )

    def _rechecks(self, chosen: Collection[dg.AssetKey]) -> set[dg.AssetKey]:
        """The tables whose blocking checks, unevaluated, hold consumers among `chosen`."""
        found = set()
        for name, consumer in self.live.consumers.items():
            if self.output_keys([consumer]) & set(chosen):
                found |= {v.check.asset_key for v in verdicts(self.instance, self.live.gates[name])
                          if v.unfinished and v.check.asset_key in self.live.keys}
        return found

    def _job_without_checks(self) -> dg.JobDefinition:
        """The pipeline job of a location without the checks that are steps of their own (a
        model's checks are part of its step); the same name, so it holds the sensor too."""
        if self._unchecked is None:
            defs = dg.Definitions(assets=self._defs.assets, jobs=[self.live.job(audited=False)],
                                  resources=self._defs.resources)
            self._unchecked = defs.resolve_job_def(PIPELINE)
        return self._unchecked

    def _fail_abandoned_runs(self) -> None:
        """Report failed the unfinished pipeline runs of this host's runners that are gone."""
        host = socket.gethostname()
        runs = self.instance.get_runs(dg.RunsFilter(
            job_name=PIPELINE, statuses=_UNFINISHED, tags={RUNNER_HOST: host}))
        for run in runs:
            if why := runner_gone(run.tags):
                self.instance.report_run_failed(run, why)


def _plain(metadata: Mapping[str, dg.MetadataValue]) -> dict[str, Any]:
    """Metadata values as plain JSON values; tables and other rich values are left out."""
    plain = {}
    for name, entry in metadata.items():
        value = getattr(entry, "value", entry)
        if isinstance(value, (bool, int, float, str)) or value is None:
            plain[name] = value
        elif isinstance(value, list) and all(isinstance(v, (bool, int, float, str)) for v in value):
            plain[name] = value
    return plain


def _failure(event: dg.DagsterEvent) -> str:
    """A failed step in one line: its error without Dagster's wrapper (`dagster.Failure`)."""
    error = event.step_failure_data.error
    lines = (error.message if error else "").strip().splitlines()
    message = lines[0] if lines else "failed"
    if error and error.cls_name == "Failure":
        message = message.split(f"{error.cls_name}: ", 1)[-1]
    return f"step {event.step_key}: {message}"
