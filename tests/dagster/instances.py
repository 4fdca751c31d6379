"""The Dagster instance the daemon tests run under: deploy/dagster.yaml, as a user copies it,
with lakelog's SQLite storage under the test's `DAGSTER_HOME` instead of its PostgreSQL storage
(deploy/README.md; the folder spelled out, so this process opens it without $DAGSTER_HOME)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lakelog.assets.instance_storage import storage_config

REPO = Path(__file__).resolve().parents[2]


def deploy_instance(dagster_home: Path, **overrides: Any) -> Path:
    """Write `dagster_home`/dagster.yaml from deploy/dagster.yaml, lakelog's SQLite storage in
    `dagster_home` for its PostgreSQL, with the top-level `overrides` (e.g. a shorter
    run-monitoring poll); returns `dagster_home`."""
    config = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    config["storage"] = storage_config(str(dagster_home.resolve()))
    config.update(overrides)
    dagster_home.mkdir(parents=True, exist_ok=True)
    (dagster_home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return dagster_home
