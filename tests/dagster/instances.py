"""The Dagster instance the daemon tests run under: deploy/dagster.yaml, as a user copies it,
with SQLite under the test's `DAGSTER_HOME` instead of its PostgreSQL storage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def deploy_instance(dagster_home: Path, **overrides: Any) -> Path:
    """Write `dagster_home`/dagster.yaml from deploy/dagster.yaml minus its storage, with the
    top-level `overrides` (e.g. a shorter run-monitoring poll); returns `dagster_home`."""
    config = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    del config["storage"]  # SQLite under DAGSTER_HOME instead of PostgreSQL
    config.update(overrides)
    dagster_home.mkdir(parents=True, exist_ok=True)
    (dagster_home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return dagster_home
