"""The runner `lakelog run` and `lakelog demo` use: one run of the pipeline job on an instance,
its report, what it leaves out, and runs whose process died."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import dagster as dg
import pytest
import yaml
from shop_records import order, page_view

from lakelog.assets.instance_file import EARLIER, INSTANCE_YAML
from lakelog.assets.instance_storage import FROM_DAGSTER_HOME, storage_config
from lakelog.assets.launcher import PreforkRunLauncher
from lakelog.assets.location import build_definitions
from lakelog.assets.naming import CATCH_UP_TAG
from lakelog.assets.run_queue import PreforkQueuedRunCoordinator
from lakelog.assets.runner import Runner, open_instance
from lakelog.assets.runner_tags import RUNNER_HOST, RUNNER_PID
from lakelog.consumers import lag
from lakelog.demo.shop import PRODUCT_STATS_CONSUMER, TOPICS
from lakelog.pipeline import Pipeline
from lakelog.quality import names
from lakelog.resources import SourceResource

PIPELINE = Pipeline("runner", topics=TOPICS, consumers=[PRODUCT_STATS_CONSUMER])
STATS = dg.AssetKey(["streams", "product_stats"])
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def instance() -> dg.DagsterInstance:
    return dg.DagsterInstance.ephemeral()


@pytest.fixture
def runner(resources, instance) -> Runner:
    return Runner(PIPELINE, resources={**resources, "source": SourceResource()},
                  instance=instance, tags={"purpose": "test"})


def test_a_run_catches_every_node_up_and_reports_it(lake, land, runner, instance):
    land("page_views", "a.ndjson", [page_view("v1", "u1", "p1"), page_view("v2", "u2", "p2")])
    land("orders", "a.ndjson", [order("o1", "u1", [("p1", 2, 5.0)], 3)])

    report = runner.catch_up()

    assert report.success and not report.failures
    assert report.of("log/page_views")[0]["records_appended"] == 2
    assert report.of("streams/product_stats")[0]["records"] == 3
    assert report.checks[f"log/orders:{names.TOPIC_CHECK}"] is True
    assert all(x.lag == 0 for x in lag(lake, PRODUCT_STATS_CONSUMER, TOPICS))
    run = instance.get_run_by_id(report.run_id)
    assert run.job_name == "pipeline" and run.tags["purpose"] == "test"
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert instance.get_latest_materialization_event(STATS) is not None

    quiet = runner.catch_up(checks=False)  # nothing new; and no check steps
    assert quiet.success and not quiet.checks
    assert quiet.of("streams/product_stats")[0]["records"] == 0


def test_what_is_left_out_takes_its_downstream_along(land, runner):
    land("page_views", "a.ndjson", [page_view("v1", "u1", "p1")])

    report = runner.catch_up(leave_out={dg.AssetKey(["log", "orders"])})

    assert "streams/product_stats" not in report.selected  # it reads orders
    assert "log/page_views" in report.selected and "log/orders" not in report.selected
    assert report.of("log/page_views")[0]["records_appended"] == 1


def test_a_run_whose_process_died_is_reported_failed(runner, instance):
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has any more
    job = build_definitions(PIPELINE).resolve_job_def("pipeline")
    tags = {RUNNER_HOST: socket.gethostname()}
    alive = instance.create_run_for_job(  # pid 1 lives as long as the machine
        job, status=dg.DagsterRunStatus.STARTED, tags={**tags, RUNNER_PID: "1"})
    abandoned = instance.create_run_for_job(  # it planned the checks last
        job, status=dg.DagsterRunStatus.STARTED, tags={**tags, RUNNER_PID: str(gone.pid)})

    report = runner.catch_up(checks=False)

    assert instance.get_run_by_id(abandoned.run_id).status == dg.DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
    # The abandoned run never evaluated the checks it planned: the consumer's gate would wait
    # for them forever, so the run evaluates them again first, checks or not.
    assert report.success and not report.blocked
    assert report.checks[f"log/orders:{names.TOPIC_CHECK}"] is True
    assert "streams/product_stats" in {m.key for m in report.materialized}


def test_runs_are_kept_beside_the_lake_unless_dagster_home_says(tmp_path):
    instance, where = open_instance(str(tmp_path / "lake"), {})
    assert where == str(tmp_path / "lake" / "dagster") and not instance.is_ephemeral
    assert (tmp_path / "lake" / "dagster" / "dagster.yaml").read_text() == (
        INSTANCE_YAML.read_text())
    home = tmp_path / "home"
    assert open_instance(str(tmp_path / "lake"), {"DAGSTER_HOME": str(home)})[1] == str(home)
    assert open_instance("s3://bucket/lake", {})[0].is_ephemeral


def test_an_instance_lakelog_makes_forks_its_runs_and_queues_the_next(tmp_path):
    """A $DAGSTER_HOME that does not exist yet, like the lake's own folder, gets lakelog's
    dagster.yaml: what `dagster dev` over it needs to start a requested run within a second or
    two. The storage-only file lakelog wrote before is replaced. A home that exists (made by
    the user, perhaps shared by projects) keeps Dagster's defaults, and a dagster.yaml of the
    user's is left as it is."""
    def opened(home: Path) -> dg.DagsterInstance:
        return open_instance(str(tmp_path / "lake"), {"DAGSTER_HOME": str(home)})[0]

    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "dagster.yaml").write_text(EARLIER)
    released = tmp_path / "released"  # the file an earlier release wrote, whole, unedited
    released.mkdir()
    shutil.copyfile(Path(__file__).with_name("instance_f411175.yaml"), released / "dagster.yaml")
    for instance in (opened(tmp_path / "new"), open_instance(str(tmp_path / "lake2"), {})[0],
                     opened(earlier), opened(released)):
        assert type(instance.run_launcher) is PreforkRunLauncher
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert {"key": CATCH_UP_TAG, "limit": 1} in limits
        assert instance.run_retries_enabled and instance.run_monitoring_enabled
        instance.dispose()
    assert (earlier / "dagster.yaml").read_text() == INSTANCE_YAML.read_text()
    assert (released / "dagster.yaml").read_text() == INSTANCE_YAML.read_text()
    reopened = opened(released)
    assert type(reopened.run_coordinator) is PreforkQueuedRunCoordinator
    reopened.dispose()

    empty = tmp_path / "empty"
    empty.mkdir()
    used = tmp_path / "used"
    used.mkdir()
    dg.DagsterInstance.from_config(str(used)).dispose()  # Dagster's files, its defaults
    for home in (empty, used):
        instance = opened(home)
        assert not (home / "dagster.yaml").exists()
        assert type(instance.run_launcher) is not PreforkRunLauncher
        instance.dispose()
    own = tmp_path / "own"
    own.mkdir()
    (own / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    opened(own).dispose()
    assert (own / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"
    edited = Path(__file__).with_name("instance_f411175.yaml").read_text() + "# mine\n"
    (own / "dagster.yaml").write_text(edited)  # an earlier release's, edited: the user's now
    opened(own).dispose()
    assert (own / "dagster.yaml").read_text() == edited


def test_lakelogs_instance_is_the_deploy_instance_on_sqlite():
    """The instance lakelog makes and deploy/dagster.yaml differ only in their storage (and
    deploy's telemetry opt-out, which is the user's to make locally)."""
    mine = yaml.safe_load(INSTANCE_YAML.read_text())
    deploy = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    assert mine.pop("storage") == storage_config(FROM_DAGSTER_HOME)
    assert set(deploy.pop("storage")) == {"postgres"}
    assert deploy.pop("telemetry") == {"enabled": False}
    assert mine == deploy
