"""`lakelog init DIR`: a project of the user's own, ready for `lakelog` and `dagster dev`.

The project (the files under ``template/``, ``$package`` replaced by its package name) holds a
pipeline module with one topic, one windowed aggregate and one SQL model, its Dagster code
location and ``workspace.yaml``, a test, lakelog's Dagster instance in ``.lakelog/dagster``
(`lakelog.assets.instance_file`), and a ``pyproject.toml`` whose ``[tool.dagster]`` and
``[tool.lakelog]`` tables point `dagster` and `lakelog` at them from the project folder — so
both work there at once, before the project is installed.
"""

from __future__ import annotations

import argparse
import keyword
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from string import Template
from typing import Any

from lakelog.assets.instance_file import write_instance_yaml
from lakelog.errors import ConfigError

TEMPLATE = Path(__file__).with_name("template")
#: Template files named so that tools do not take them for files of lakelog's own.
RENAMED = {"gitignore": ".gitignore"}
#: Names a project package must not take: it would shadow what the project imports.
TAKEN = {"lakelog", "dagster", "pyspark", "deltalake", "tests"}

Emit = Callable[[argparse.Namespace, Any, str], None]


def package_name(text: str) -> str:
    """A Python package name for a project called `text` (``My Shop`` -> ``my_shop``)."""
    name = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_")
    name = re.sub(r"^[0-9_]+", "", name)
    if not name:
        raise ConfigError(f"cannot make a package name of {text!r}: give one with --name")
    return name


def check_package(name: str) -> str:
    if not name.isidentifier() or not name.isascii() or keyword.iskeyword(name) or (
            name != name.lower()):
        raise ConfigError(f"package name {name!r} must be a lowercase Python identifier")
    if name in TAKEN or name in sys.stdlib_module_names:
        raise ConfigError(f"package name {name!r} would shadow the module {name} the project "
                          "needs: choose another with --name")
    return name


def scaffold(target: Path, package: str) -> list[Path]:
    """Write the project into `target` (new or empty); returns the files written."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"{target} exists and is not an empty folder: lakelog init writes a "
                          "new project")
    written = []
    for source in sorted(TEMPLATE.rglob("*.tmpl")):
        parts = list(source.relative_to(TEMPLATE).with_suffix("").parts)
        parts = [package if p == "package" else RENAMED.get(p, p) for p in parts]
        path = target.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = Template(source.read_text(encoding="utf-8")).substitute(package=package)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    # The project's Dagster instance (the folder its DAGSTER_HOME names, and where `lakelog run`
    # keeps runs without one), so that `dagster dev` started first runs under lakelog's too.
    written.append(write_instance_yaml(target / ".lakelog" / "dagster"))
    return written


def cmd_init(args: argparse.Namespace, emit: Emit) -> None:
    target = Path(args.dir)
    package = check_package(args.name or package_name(target.resolve().name))
    written = scaffold(target, package)
    spec = f"{package}.pipeline:pipeline"
    emit(
        args,
        {"dir": str(target), "package": package, "pipeline": spec,
         "files": [str(p.relative_to(target)) for p in written]},
        f"created {target}: pipeline {spec}, its Dagster code location and a test\n"
        f"next:\n"
        f"  cd {shlex.quote(str(target))}\n"
        f"  export DAGSTER_HOME=\"$PWD/.lakelog/dagster\"   # one instance for lakelog and the UI\n"
        f"  lakelog produce events examples/events.ndjson\n"
        f"  lakelog run\n"
        f"  dagster dev\n"
        f"  pytest",
    )


def add_init_command(sub: argparse._SubParsersAction, emit: Emit) -> None:
    init = sub.add_parser("init", help="create a project of your own: a pipeline with a topic, "
                          "a windowed aggregate and a SQL model, its Dagster location, a test")
    init.add_argument("dir", help="the project folder (new, or empty)")
    init.add_argument("--name", help="its Python package (default: from the folder's name)")
    init.add_argument("--json", action="store_true", help="machine-readable output")
    init.set_defaults(func=lambda args: cmd_init(args, emit))
