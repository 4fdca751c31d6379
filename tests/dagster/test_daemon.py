"""End to end: the real `dagster-daemon` keeps every derived table up to date, untouched.

A workload lands in the landing zone and a shop database waits to be captured; the daemon's
pipeline sensor (running by default) requests the runs, its run queue launches them, and the
test only watches the tables — with delta-rs, not Spark — until everything has caught up.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from instances import REPO, deploy_instance
from processes import stop_group, subprocess_env

from lakelog.assets.location import build_location
from lakelog.consumers import lag
from lakelog.demo import shop_cdc
from lakelog.demo.shop import CONSUMERS, TOPICS
from lakelog.demo.shop_joins import JOINS
from lakelog.demo.shop_windows import WINDOWS
from lakelog.demo.pipeline import pipeline
from lakelog.demo.workload import Workload
from lakelog.lake import EmbeddedLake

DAEMON = Path(sys.executable).with_name("dagster-daemon")
#: As the pipeline declares them (its consumer group included).
EVERY_CONSUMER = {name: pipeline.consumer(name) for name in (
    *CONSUMERS, *shop_cdc.CONSUMERS, *(j.consumer.name for j in JOINS.values()),
    *(w.consumer.name for w in WINDOWS.values()))}
EVERY_TOPIC = {**TOPICS, **shop_cdc.CHANGELOGS}
#: Derived tables the workload must fill. Late-record and rejection tables may stay empty, and
#: ten minutes of events close no session (user_sessions) and no one-hour join window (search_ctr).
FILLED = (
    "streams/product_stats", "streams/cart_state", "streams/cart_orders", "log/cart_orders",
    "streams/revenue_per_minute", "streams/product_views_10m",
    "streams/search_clicks", "streams/orders_enriched", "streams/orders_as_of",
    "streams/customer_orders", "tables/customers", "tables/products", "tables/inventory",
    "history/customers", "views/product_funnel_hourly", "views/top_products_last_hour",
    "views/customer_lifetime_value",
)


def no_spark():
    raise AssertionError("the test reads metadata only")


def rows(home: Path, path: str) -> int | None:
    """Rows of a Delta table by delta-rs; None while it does not exist."""
    if not (home / path / "_delta_log").exists():
        return None
    return DeltaTable(str(home / path)).to_pyarrow_table().num_rows


def waiting_for(home: Path) -> list[str]:
    """What is not there yet: tables missing or empty, consumers behind."""
    lake = EmbeddedLake(no_spark, str(home))
    missing = [p for p in FILLED if not rows(home, p)]
    missing += [o.path for c in EVERY_CONSUMER.values() for o in c.outputs
                if rows(home, o.path) is None]
    lags = {name: lag(lake, c, EVERY_TOPIC) for name, c in EVERY_CONSUMER.items()}
    behind = [name for name, x in lags.items() if not x or any(p.lag for p in x)]
    return missing + [f"{name} behind" for name in behind]


@pytest.fixture
def homes(tmp_path) -> tuple[Path, Path]:
    """A Dagster home with deploy/dagster.yaml on SQLite, and a lake with a workload landed and
    a shop database to capture."""
    dagster_home = deploy_instance(tmp_path / "dagster_home")
    home = tmp_path / "lake"
    workload = Workload(events=400, batches=1, seed=11,
                        start=datetime(2026, 1, 5, 8, 55, tzinfo=timezone.utc))
    workload.write_batch(0, home)  # 08:55 to 09:05: 08:00 is the last complete hour
    conn, dialect = shop_cdc.connect(str(home))
    shop_cdc.prepare(conn, dialect, seed=11)
    conn.close()
    return dagster_home, home


@pytest.mark.slow
def test_the_daemon_brings_every_derived_table_up_to_date(homes, tmp_path):
    dagster_home, home = homes
    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [str(DAEMON), "run", "-w", "workspace.yaml"], cwd=REPO,
        env=subprocess_env(DAGSTER_HOME=str(dagster_home), LAKELOG_HOME=str(home)),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 8 * 60  # a liveness bound, not a speed check
        while (left := waiting_for(home)) and time.monotonic() < deadline:
            assert daemon.poll() is None, "dagster-daemon exited"
            time.sleep(5)
    finally:
        stop_group(daemon, timeout=60)
        log.close()
    instance = dg.DagsterInstance.from_config(str(dagster_home))
    runs = instance.get_run_records(dg.RunsFilter(job_name="pipeline"))
    statuses = sorted(r.dagster_run.status.value for r in runs)
    assert not left, f"still waiting for {left}; pipeline runs: {statuses}"
    assert runs and all(r.dagster_run.tags.get("dagster/sensor_name") == "pipeline" for r in runs)
    assert rows(home, "log/page_views") > 0 and rows(home, "log/cdc.customers") > 0
    # The runs evaluate the checks that gate consumers, not the audits (the audit job's).
    pipeline_runs = {r.dagster_run.run_id for r in runs}
    live = build_location(pipeline).live
    evaluated = {key: {e.run_id for e in instance.event_log_storage
                       .get_asset_check_execution_history(key, limit=100)} & pipeline_runs
                 for key in live.audits | live.checks}
    filled_topics = [k for k in live.checks
                     if k.asset_key.path[0] == "log" and rows(home, k.asset_key.to_user_string())]
    assert len(filled_topics) > 5 and all(evaluated[k] for k in filled_topics)
    assert not any(evaluated[k] for k in live.audits)

