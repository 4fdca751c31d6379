"""The real Dagster UI in a real browser: `dagster dev` on this repository, driven by Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.execution.backfill import BulkActionStatus
from deltalake import DeltaTable
from processes import free_port, stop_group, subprocess_env

from lakelog.assets.launcher import PreforkRunLauncher

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[2]
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]

if not Path(CHROMIUM).exists():  # .ci/run installs Debian's chromium; say so loudly elsewhere
    pytest.skip("Chromium is not installed (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402


def view(i: int) -> str:
    return json.dumps(
        {
            "event_id": f"ui-{i}", "user_id": f"u{i % 3}", "session_id": "s1", "page": "product",
            "product_id": f"P{i:04d}", "device_time": "2026-01-05T08:00:00.000Z",
            "sent_time": "2026-01-05T08:00:01.000Z", "received_time": "2026-01-05T08:00:01.250Z",
        }
    )


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory):
    home = tmp_path_factory.mktemp("lake")
    landing = home / "landing" / "page_views"
    landing.mkdir(parents=True)
    (landing / "ui.ndjson").write_text("".join(view(i) + "\n" for i in range(5)) + "{broken\n")
    port = free_port()
    dagster_home = tmp_path_factory.mktemp("dagster_home")
    deploy = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    (dagster_home / "dagster.yaml").write_text(  # runs queued and forked as deploy has them
        yaml.safe_dump({key: deploy[key] for key in ("run_launcher", "run_coordinator")}))
    env = subprocess_env(DAGSTER_HOME=str(dagster_home), LAKELOG_HOME=str(home))
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(90):  # poll for up to ~3 minutes: a liveness wait, not a speed check
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, "dagster dev exited"
            time.sleep(2)
        else:
            pytest.fail("dagster dev did not come up")
        yield url, home, dagster_home
    finally:
        stop_group(proc, timeout=20)


@pytest.fixture(scope="module")
def page(dagster_dev):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield browser.new_page(viewport={"width": 1400, "height": 900})
        browser.close()


def dismiss_welcome(page):
    """Close the UI's welcome dialog if it is open. It can open behind another dialog (the launch
    dialog), whose header then takes the pointer: the click is then sent to the button itself."""
    skip = page.get_by_role("button", name="Skip")
    if not skip.count():
        return
    try:
        skip.first.click(timeout=2_000)
    except PlaywrightTimeout:
        try:
            skip.first.dispatch_event("click", timeout=2_000)
        except PlaywrightTimeout:  # it closed on its own meanwhile
            pass


def click(page, target, *, tries: int = 6) -> None:
    """Click `target`; the UI's welcome dialog may pop up over the page at any moment, so it is
    dismissed before each try, and a click it intercepted is tried again."""
    for _ in range(tries - 1):
        dismiss_welcome(page)
        try:
            target.click(timeout=5_000)
            return
        except PlaywrightTimeout:
            continue
    dismiss_welcome(page)
    target.click()  # the last try fails with Playwright's explanation


def test_ui_shows_assets_sensors_and_schedule(dagster_dev, page):
    url, _, _ = dagster_dev
    page.goto(f"{url}/assets/streams")  # the catalog lists the folder's assets
    page.get_by_text("product_stats").first.wait_for(timeout=60_000)
    dismiss_welcome(page)
    page.goto(f"{url}/assets/log")
    page.get_by_text("page_views").first.wait_for(timeout=60_000)
    body = page.inner_text("body")
    for topic in ("page_views", "searches", "clicks", "cart_events", "orders"):
        assert topic in body
    page.goto(f"{url}/automation")
    page.get_by_text("daily_maintenance").first.wait_for(timeout=60_000)
    assert page.get_by_text("pipeline", exact=True).count() > 0  # the one sensor


def test_materialize_from_the_ui_writes_the_log(dagster_dev, page):
    url, home, dagster_home = dagster_dev
    page.goto(f"{url}/assets/log/page_views")
    button = page.locator("button", has_text="Materialize").first
    button.wait_for(timeout=60_000)
    click(page, button)
    table = home / "log" / "page_views"
    for _ in range(120):  # the run is queued, then started by the daemon: wait for its commit
        if (table / "_delta_log").exists() and DeltaTable(str(table)).version() >= 1:
            break
        time.sleep(2)
    else:
        pytest.fail("the run launched from the UI did not write the log")
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 5
    # Launched by the daemon of `dagster dev` through the prefork launcher: a forked worker.
    instance = dg.DagsterInstance.from_config(str(dagster_home))
    launched = [r for r in instance.get_runs() if r.status not in (
        dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING)]
    assert launched and all(PreforkRunLauncher.worker_of(r) for r in launched)
    # The materialization's metadata is shown on the asset page.
    for _ in range(60):
        page.goto(f"{url}/assets/log/page_views")
        page.wait_for_timeout(2000)
        text = page.inner_text("body")
        if "records_appended" in text:
            break
    assert "records_appended" in text and "dead_letters" in text


def test_backfill_of_replay_hours_launched_from_the_ui(dagster_dev, page):
    """A range of hourly `replays/*` partitions, backfilled from the asset's launch dialog once
    the pipeline sensor (on in `dagster dev`) has consumed the page views into the live windows."""
    url, home, dagster_home = dagster_dev
    live = home / "streams" / "product_views_10m"
    for _ in range(120):  # a liveness wait for the automation, not a speed check
        if (live / "_delta_log").exists() and DeltaTable(str(live)).to_pyarrow_table().num_rows:
            break
        time.sleep(2)
    else:
        pytest.fail("the pipeline sensor did not bring streams/product_views_10m up to date")

    page.goto(f"{url}/assets/replays/product_views_10m")
    page.locator("button:not([disabled])", has_text="Materialize").first.wait_for(timeout=60_000)
    click(page, page.locator("button", has_text="Materialize").first)
    dialog = page.get_by_role("dialog").filter(has_text="Launch runs to materialize")
    click(page, dialog.get_by_role("button", name="Show all partitions"))  # January: > 90 days
    hours = dialog.locator("input[type=text]").first
    hours.fill("[2026-01-05-07:00...2026-01-05-08:00]")
    hours.press("Enter")
    dialog.get_by_text("2 partitions").wait_for(timeout=30_000)
    click(page, dialog.get_by_role("button", name="Launch backfill"))
    created = page.get_by_text("Created backfill")
    created.wait_for(timeout=30_000)
    backfill_id = created.inner_text().split()[-1]

    instance = dg.DagsterInstance.from_config(str(dagster_home))
    for _ in range(150):  # the daemon's backfill loop launches the run; wait for it to finish
        backfill = instance.get_backfill(backfill_id)
        if backfill.status != BulkActionStatus.REQUESTED:
            break
        time.sleep(2)
    assert backfill.status == BulkActionStatus.COMPLETED_SUCCESS, backfill.status
    key = dg.AssetKey(["replays", "product_views_10m"])
    subset = backfill.asset_backfill_data.target_subset.get_partitions_subset(key)
    assert sorted(subset.get_partition_keys()) == ["2026-01-05-07:00", "2026-01-05-08:00"]
    runs = instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS]  # a range in one run

    # Five views at 08:00, each in ten one-minute-sliding ten-minute windows.
    windows = DeltaTable(str(home / "replays" / "product_views_10m")).to_pyarrow_table().to_pylist()
    assert sum(w["views"] for w in windows) == 50
    assert {w["product_id"] for w in windows} == {f"P{i:04d}" for i in range(5)}
    check = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(key, "matches_live"))
    assert check.event.dagster_event.event_specific_data.passed  # the replay equals the live windows
    page.goto(f"{url}/assets/replays/product_views_10m")
    page.get_by_text("Latest materialization").first.wait_for(timeout=60_000)
    page.get_by_text("Never materialized").wait_for(state="detached", timeout=60_000)
