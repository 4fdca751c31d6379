"""The models of a folder as one dependency graph, checked as a whole when it is loaded.

Every ``**/*.sql`` file below the folder is one model, named after the file; its Dagster group is
its folder. Hidden files and folders (``.name``) are skipped. Loading fails, naming the file, on a bad config, a ref to something that is neither a
model nor a known lakelog table, two files with the same model name, or a dependency cycle.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from lakelog.views.errors import ModelError
from lakelog.views.models import Model, ref_path
from lakelog.views.parse import check_name, parse_model

#: The group of models directly in the models folder.
ROOT_GROUP = "views"


@dataclass(frozen=True)
class ModelGraph:
    """Models in dependency order (every model after the models it refs), and the lakelog
    tables they may read (paths such as ``log/orders``)."""

    models: Mapping[str, Model]
    tables: frozenset[str]

    def upstream(self, name: str) -> tuple[str, ...]:
        """The models `name` refs directly."""
        return tuple(r for r in self.models[name].refs if r in self.models)

    def inputs(self, name: str) -> tuple[str, ...]:
        """The stored tables `name` reads: lakelog tables and stored models it refs, and through
        the view models it refs (whose SQL is inlined) theirs."""
        found: dict[str, None] = {}
        for ref in self.models[name].refs:
            model = self.models.get(ref)
            if model is not None and not model.stored:
                found.update(dict.fromkeys(self.inputs(ref)))
            else:
                found[ref_path(ref)] = None
        return tuple(found)


def _folder(relative: Path, file: str) -> str:
    parts = relative.parent.parts
    for part in parts:
        check_name(part, file=file, what="folder")
    return "_".join(parts) or ROOT_GROUP


def load_models(directory: str | Path, tables: Collection[str]) -> ModelGraph:
    """Parse and check every model below `directory`; `tables` are the known lakelog tables."""
    root = Path(directory)
    if not root.is_dir():
        raise ModelError(f"{root}: no such folder of SQL models")
    models: dict[str, Model] = {}
    for path in sorted(root.rglob("*.sql")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue  # editor backups, checkpoints
        file = str(path)
        name = check_name(path.stem, file=file, what="model name")
        if name in models:
            raise ModelError(
                f"{file}: duplicate model name {name!r}, also defined in {models[name].file}"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ModelError(f"{file}: not UTF-8 text ({exc.reason})") from None
        models[name] = parse_model(text, name=name, file=file, folder=_folder(relative, file))
    known = frozenset(tables)
    for model in models.values():
        for ref in model.refs:
            if ref not in models and ref not in known:
                kind = "lakelog table" if "/" in ref else "model"
                raise ModelError(
                    f"{model.file}: unknown ref {ref!r}: no such {kind}"
                    + ("" if "/" in ref else f" (models: {', '.join(sorted(models))})")
                )
    return ModelGraph(_ordered(models), known)


def _ordered(models: Mapping[str, Model]) -> dict[str, Model]:
    """`models` in dependency order; a cycle is an error that lists its files in order."""
    done: dict[str, Model] = {}
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in visiting:
            cycle = visiting[visiting.index(name) :] + [name]
            raise ModelError(
                f"{models[name].file}: dependency cycle: "
                + " -> ".join(models[n].file for n in cycle)
            )
        visiting.append(name)
        for ref in models[name].refs:
            if ref in models:
                visit(ref)
        visiting.pop()
        inlined: dict[str, None] = {}
        for ref in models[name].refs:
            view = done.get(ref)
            if view is not None and not view.stored:
                inlined.update(dict.fromkeys((*view.inlined, view.template)))
        done[name] = replace(models[name], inlined=tuple(inlined))

    for name in models:
        visit(name)
    return done
