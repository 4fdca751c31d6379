"""The `dagster.yaml` of the Dagster instances lakelog makes (``instance.yaml`` beside this
module: deploy/dagster.yaml with Dagster's SQLite files, stored through lakelog's classes,
instead of PostgreSQL). No Dagster import, so `lakelog init` can write it cheaply."""

from __future__ import annotations

import hashlib
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

#: SHA-256 digests of the `INSTANCE_YAML` texts earlier lakelog releases wrote, each as written:
#: a `dagster.yaml` holding one unedited is lakelog's, so replaced by the current one.
EARLIER_DIGESTS = frozenset({
    "a1be09b97c106b88fcee6d6ba4503e6188ab6692e712335971ca67e7099acef0",  # 5f5a2da
    "5a039745530eaa5f7fcfbc1d4199f9b047af08e08d525f6ef7ca3b084251b920",  # 78f4eba
    # f411175: Dagster's run queue, the prefork server started at the first run, not before
    "7f72a55614311c77e4691cc51ccc4b94ddf94809b93ab72647eb65e48904cb4d",
})


def earlier(text: str) -> bool:
    """Whether `text` is a `dagster.yaml` an earlier lakelog wrote, unedited."""
    return text == EARLIER or hashlib.sha256(text.encode()).hexdigest() in EARLIER_DIGESTS


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
    an earlier lakelog wrote, unedited (`earlier`). Another `dagster.yaml`, or a folder of the
    user's, is left alone."""
    path = home / "dagster.yaml"
    if path.exists():
        if earlier(path.read_text(encoding="utf-8")):
            write_instance_yaml(home)
    elif lakelogs:
        write_instance_yaml(home)
