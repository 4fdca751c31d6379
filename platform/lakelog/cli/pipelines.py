"""Which pipeline a command works on: ``--pipeline module[:attribute]``, the way ``dagster -m``
names a code location.

The first of: the ``--pipeline`` option, ``$LAKELOG_PIPELINE``, ``[tool.lakelog] pipeline`` in
``./pyproject.toml`` (what `lakelog init` writes, so commands in a project need no option), and
the demo shop. The module is imported with the working directory on the path, as Dagster does;
without an attribute, the module's one `Pipeline` is taken.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from lakelog.errors import ConfigError, LakelogError
from lakelog.pipeline import Pipeline

VARIABLE = "LAKELOG_PIPELINE"
DEMO = "lakelog.demo.pipeline:pipeline"


def pipeline_spec(option: str | None, environ: Mapping[str, str], cwd: Path) -> str:
    """The ``module[:attribute]`` to load (see the module docstring for the order)."""
    if option:
        return option
    if environ.get(VARIABLE):
        return environ[VARIABLE]
    return _project_spec(cwd / "pyproject.toml") or DEMO


def _project_spec(pyproject: Path) -> str | None:
    if not pyproject.is_file():
        return None
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: tomli, the same parser (Dagster requires it)
        import tomli as tomllib

    try:
        config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{pyproject}: not valid TOML ({exc})") from None
    spec = config.get("tool", {}).get("lakelog", {}).get("pipeline")
    if spec is not None and not isinstance(spec, str):
        raise ConfigError(f"{pyproject}: [tool.lakelog] pipeline must be a string "
                          "'module[:attribute]'")
    return spec


def load_pipeline(spec: str, cwd: Path) -> Pipeline:
    """The `Pipeline` that `spec` (``module[:attribute]``) names; a one-line `LakelogError` for
    a module that does not import, an attribute it lacks, or something not a pipeline."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not all(p.isidentifier() for p in module_name.split(".")) or (
            attribute and not attribute.isidentifier()):
        raise ConfigError(f"--pipeline {spec!r}: expected module[:attribute], e.g. "
                          "my_project.pipeline:pipeline")
    if str(cwd) not in sys.path:
        sys.path.insert(0, str(cwd))
    try:
        module = importlib.import_module(module_name)
    except LakelogError as exc:  # the declaration itself is bad: say what
        raise ConfigError(f"pipeline module {module_name}: {exc}") from exc
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConfigError(f"no module named {module_name!r} (looked in {cwd} and the "
                              "installed packages)") from exc
        raise ConfigError(f"pipeline module {module_name} failed to import: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - the user's module: one line, not a traceback
        first = str(exc).strip().splitlines()[:1]
        raise ConfigError(f"pipeline module {module_name} failed to import: "
                          f"{type(exc).__name__}: {''.join(first)}") from exc
    if attribute:
        if not hasattr(module, attribute):
            raise ConfigError(f"module {module_name} has no attribute {attribute!r}")
        found = getattr(module, attribute)
        if not isinstance(found, Pipeline):
            raise ConfigError(f"{module_name}:{attribute} is a {type(found).__name__}, not a "
                              "lakelog Pipeline")
        return found
    found = {name: v for name, v in vars(module).items() if isinstance(v, Pipeline)}
    distinct = {id(v) for v in found.values()}
    if len(distinct) != 1:
        names = ", ".join(sorted(found)) or "none"
        raise ConfigError(f"module {module_name} declares {len(distinct)} lakelog Pipelines "
                          f"({names}): name one as {module_name}:<attribute>")
    return next(iter(found.values()))


def resolve(option: str | None) -> Pipeline:
    """The pipeline a command was pointed at, from its option and this process's surroundings."""
    cwd = Path(os.getcwd())
    return load_pipeline(pipeline_spec(option, os.environ, cwd), cwd)
