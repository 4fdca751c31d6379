"""Where an incremental model's progress is kept: in its own table's commits.

Every commit to ``views/<name>`` carries Delta application transactions:

- ``lakelog.view:<name>@<input path>`` — the version of that input the table now reflects, and
  ``...#id`` a hash of the input's Delta table id, so a recreated input is noticed;
- ``lakelog.view:<name>#sql`` — a fingerprint of the model's SQL (with that of the view models
  it inlines) and key, so an edited model is rebuilt instead of mixing old and new logic;
- ``lakelog.view:<name>`` — the table version the run was planned on (plus one), so two runs
  planned on the same version conflict and one fails without writing.

The progress is thus committed atomically with the rows it describes: no crash can leave the
table ahead of or behind its recorded input versions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from lakelog.lake import AppTxn, Lake, Snapshot
from lakelog.views.graph import ModelGraph
from lakelog.views.models import Model

APP = "lakelog.view"


def _input_app(model: Model, path: str) -> str:
    return f"{APP}:{model.name}@{path}"


def _sql_app(model: Model) -> str:
    return f"{APP}:{model.name}#sql"


def _hash60(text: str) -> int:
    """60 bits of SHA-256: a positive value that fits a Delta application transaction."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


def fingerprint(model: Model) -> int:
    """60 bits of a hash of what the table's rows depend on: the SQL (its own and that of the
    view models it inlines), the key, the partitioning."""
    source = "\n".join([
        model.template, *model.inlined, ",".join(model.config.unique_key),
        str(model.config.partition_by),
    ])
    return _hash60(source)


def _id_app(model: Model, path: str) -> str:
    return f"{APP}:{model.name}@{path}#id"


def state_txns(model: Model, output: Snapshot, inputs: Mapping[str, Snapshot]) -> list[AppTxn]:
    """The application transactions a commit of `model` planned on `output`, reading `inputs`
    (pinned snapshots by path), carries."""
    return [
        AppTxn(f"{APP}:{model.name}", output.version + 1),
        AppTxn(_sql_app(model), fingerprint(model)),
        *(AppTxn(_input_app(model, path), s.version) for path, s in sorted(inputs.items())),
        *(AppTxn(_id_app(model, path), _hash60(s.table_id)) for path, s in sorted(inputs.items())),
    ]


def load_state(
    output: Snapshot, model: Model, inputs: Mapping[str, Snapshot]
) -> tuple[dict[str, int] | None, str]:
    """The input versions `output` reflects, or None and why it must be rebuilt from scratch."""
    sql = output.txn_version(_sql_app(model))
    if sql is None:
        return None, "first run"
    if sql != fingerprint(model):
        return None, "the model's SQL or key changed"
    state = {}
    for path, pinned in inputs.items():
        current = pinned.version
        done = output.txn_version(_input_app(model, path))
        if done is None:
            return None, f"{path} is a new input"
        identity = output.txn_version(_id_app(model, path))
        if done > current or (identity is not None and identity != _hash60(pinned.table_id)):
            return None, f"{path} was recreated since the last run (a new Delta table)"
        state[path] = done
    return state, "changes since the last run"


def why_stale(lake: Lake, graph: ModelGraph, name: str) -> str | None:
    """Why stored model `name` must run to reflect its inputs; None when it does already, when it
    is a view (recomputed on every read) or when an input does not exist yet (it cannot run).

    Metadata only — the versions its last commit recorded against the inputs' current ones — so
    a sensor can ask on every tick.
    """
    model = graph.models[name]
    paths = graph.inputs(name)
    if not model.stored or not all(lake.exists(p) for p in paths):
        return None
    if not lake.exists(model.path):
        return "never materialized"
    inputs = {p: lake.snapshot(p) for p in paths}
    state, reason = load_state(lake.snapshot(model.path), model, inputs)
    if state is None:
        return reason
    changed = [f"{p} v{state[p]}->v{s.version}" for p, s in inputs.items() if s.version > state[p]]
    return f"changed: {', '.join(changed)}" if changed else None
