"""The `dagster.yaml` of the Dagster instances lakelog makes (``instance.yaml`` beside this
module: deploy/dagster.yaml with Dagster's SQLite files, stored through lakelog's classes,
instead of PostgreSQL). No Dagster import, so `lakelog init` can write it cheaply."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

INSTANCE_YAML = resources.files(__package__) / "instance.yaml"
#: What lakelog wrote as the `dagster.yaml` of a lake's instance before `INSTANCE_YAML` (its
#: storage alone, which left Dagster's spawning run launcher): lakelog's, so replaced.
EARLIER = (
    "# The Dagster instance of `lakelog run` and `lakelog demo` for this lake: Dagster's\n"
    "# SQLite files in this folder, stored through lakelog's classes.\n"
    "storage:\n  custom:\n    class: SqliteStorage\n    config:\n      base_dir:\n"
    "        env: DAGSTER_HOME\n    module: lakelog.assets.instance_storage\n"
)


def write_instance_yaml(home: Path) -> Path:
    """Make `home` (created if need be) an instance of lakelog's; returns its `dagster.yaml`,
    written whole or not at all (a process reading it meanwhile sees the old file or the new)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "dagster.yaml"
    staged = home / f".dagster.yaml.{os.getpid()}"
    staged.write_text(INSTANCE_YAML.read_text(encoding="utf-8"), encoding="utf-8")
    os.replace(staged, path)
    return path


def ensure_instance_yaml(home: Path, *, lakelogs: bool) -> None:
    """Write lakelog's `dagster.yaml` into `home` where it is lakelog's to write: a folder that
    is `lakelogs` (its lake's, or one lakelog is making now) and has none, or one holding what
    lakelog wrote `EARLIER`. Another `dagster.yaml`, or a folder of the user's, is left alone."""
    path = home / "dagster.yaml"
    if path.exists():
        if path.read_text(encoding="utf-8") == EARLIER:
            write_instance_yaml(home)
    elif lakelogs:
        write_instance_yaml(home)
