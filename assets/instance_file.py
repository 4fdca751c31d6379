"""The `dagster.yaml` of the Dagster instances lakelog makes (``instance.yaml`` beside this
module: deploy/dagster.yaml with Dagster's SQLite files, stored through lakelog's classes, for
PostgreSQL). No Dagster import, so `lakelog init` can write it cheaply."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

INSTANCE_YAML = resources.files(__package__) / "instance.yaml"


def write_instance_yaml(home: Path) -> Path:
    """Make `home` (created if need be) an instance of lakelog's; returns its `dagster.yaml`."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "dagster.yaml"
    path.write_text(INSTANCE_YAML.read_text(encoding="utf-8"), encoding="utf-8")
    return path
