"""End to end: the `dagster` CLI loads the code location and materializes a topic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from shop_records import page_view
from processes import subprocess_env

REPO = Path(__file__).resolve().parents[2]


def dagster(*args: str, home: Path, lakelog_home: Path) -> subprocess.CompletedProcess:
    env = subprocess_env(DAGSTER_HOME=str(home), LAKELOG_HOME=str(lakelog_home))
    return subprocess.run(
        [sys.executable, "-m", "dagster", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )


@pytest.fixture
def homes(tmp_path) -> tuple[Path, Path]:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return home, tmp_path / "lake"


@pytest.mark.slow
def test_definitions_validate(homes):
    home, lake = homes
    done = dagster("definitions", "validate", "-w", "workspace.yaml", home=home, lakelog_home=lake)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Validation successful for code location lakelog" in done.stderr + done.stdout


@pytest.mark.slow
def test_asset_materialize_ingests_landing_files(homes):
    home, lake = homes
    landing = lake / "landing" / "page_views"
    landing.mkdir(parents=True)
    (landing / "a.ndjson").write_text(
        "".join(json.dumps(page_view(f"e{i}", f"u{i}", "p1", i)) + "\n" for i in range(3))
    )

    done = dagster(
        "asset", "materialize", "--select", "log/page_views", "-m", "lakelog.assets.definitions",
        home=home, lakelog_home=lake,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    log = DeltaTable(str(lake / "log" / "page_views")).to_pyarrow_table()
    assert sorted(log.column("event_id").to_pylist()) == ["e0", "e1", "e2"]
    offsets: dict[int, list[int]] = {}
    for row in log.select(["partition", "offset"]).to_pylist():
        offsets.setdefault(row["partition"], []).append(row["offset"])
    assert all(sorted(o) == list(range(len(o))) for o in offsets.values())


@pytest.mark.slow
def test_backfill_of_a_partition_range_replays_the_windows(homes):
    """`--partition-range` runs the hourly replay of a window table as one run, from the log."""
    home, lake = homes
    landing = lake / "landing" / "page_views"
    landing.mkdir(parents=True)
    views = []
    for i, hour in enumerate((8, 8, 9, 9, 9)):
        view = page_view(f"e{i}", f"u{i % 2}", "p1")
        for field in ("device_time", "sent_time", "received_time"):
            view[field] = view[field].replace("T08:", f"T{hour:02d}:")
        views.append(view)
    (landing / "a.ndjson").write_text("".join(json.dumps(v) + "\n" for v in views))
    live = "streams/product_views_10m"
    consumed = dagster(
        "asset", "materialize", "-m", "lakelog.assets.definitions",
        "--select", f"log/page_views,{live},{live}_late",
        home=home, lakelog_home=lake,
    )
    assert consumed.returncode == 0, consumed.stderr[-3000:]

    replayed = dagster(
        "asset", "materialize", "-m", "lakelog.assets.definitions",
        "--select", "replays/product_views_10m",
        "--partition-range", "2026-01-05-07:00...2026-01-05-09:00",
        home=home, lakelog_home=lake,
    )
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert "RUN_SUCCESS" in replayed.stderr
    columns = ["product_id", "window_start", "window_end", "views"]
    windows = [
        DeltaTable(str(lake / path)).to_pyarrow_table().select(columns).sort_by(
            [(c, "ascending") for c in columns]
        ).to_pylist()
        for path in (live, "replays/product_views_10m")
    ]
    # 10-minute windows every minute: 10 per view; two views at 08:00 and three at 09:00 (+1 s)
    assert windows[0] == windows[1] and sum(w["views"] for w in windows[0]) == 50
    assert {w["window_start"].hour for w in windows[1]} == {7, 8, 9}  # starts 07:51 to 09:00
