"""A consumer's definition, kept in its checkpoint: a batch of a consumer declared otherwise
is refused.

What a stateful consumer's outputs hold follows from how it is declared: the topics it
reads, and a windowed aggregate's window, emit mode, group-by columns and aggregations, a
join's keys and columns. Declared otherwise over the same tables and state, its next batches
would mix rows of two meanings without an error: windows of two sizes in one table, or, from
update to final emit, windows published again beside the rows update mode left. Structured
Streaming refuses a stateful query changed over an existing checkpoint; here each batch keeps
the consumer's `Consumer.definition` in its checkpoint's state, and a batch of a consumer
declared otherwise is refused before it plans or resumes anything, saying what changed and how
to derive the outputs again (``lakelog offsets reset <consumer> --to earliest --rebuild``: the
rebuild empties the state, so the next batch keeps the new definition). A checkpoint without
one (written before lakelog kept them) takes the consumer's as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pyspark.sql import types as T

from lakelog.consumers.checkpoints import Checkpoint
from lakelog.consumers.consumer import Consumer
from lakelog.errors import DefinitionChangedError

#: The key of the checkpoint's state that holds the definition.
DEFINITION = "definition"


def check(consumer: Consumer, checkpoint: Checkpoint) -> None:
    """Refuse a batch of `consumer` over `checkpoint` when the definition it keeps differs.
    Only the names both have are compared: a name a later lakelog adds is taken as declared."""
    kept = checkpoint.state.get(DEFINITION)
    if not consumer.definition or kept is None:
        return
    declared = _declared(consumer)
    changed = [f"{name} {kept[name]!r} -> {declared[name]!r}"
               for name in sorted(set(kept) & set(declared)) if kept[name] != declared[name]]
    if not changed:
        return
    unfinished = "" if checkpoint.plan is None else (
        f" Batch {checkpoint.plan.batch} was planned under the earlier definition and is not "
        "finished: finish it with that definition first.")
    raise DefinitionChangedError(
        f"consumer {consumer.name} is declared otherwise than when its outputs and state were "
        f"written ({'; '.join(changed)}): its batches would mix the two. Derive them again "
        f"from the log: lakelog offsets reset {consumer.name} --to earliest --rebuild (or give "
        f"the changed declaration a name of its own).{unfinished}"
    )


def kept(consumer: Consumer, state: Mapping[str, Any]) -> Mapping[str, Any]:
    """`state` with the consumer's definition in it, to save with a batch's plan and commit."""
    if not consumer.definition:
        return state
    return {**state, DEFINITION: _declared(consumer)}


def _declared(consumer: Consumer) -> dict[str, str]:
    """The consumer's definition and the topics it reads (in any order): records of another
    topic would be folded into the state the earlier ones made (a table join's totals counted
    from two fact topics)."""
    return {"topics": ", ".join(sorted(consumer.topics)), **dict(consumer.definition)}


#: Field values shown as they are; any other (a function, a column expression of a user's
#: own aggregation) by its type's name, which does not change from one process to the next.
PLAIN = (str, int, float, bool, type(None), timedelta)


def described(declared: Any) -> str:
    """A declared dataclass (a window kind, an aggregation, a pattern's step) as its class and
    the fields that differ from their defaults, e.g. ``Hopping(size=0:10:00, hop=0:01:00)``,
    ``Sum(name=revenue, column=total)``, ``Sum(name=units, column=quantity, dtype=bigint)``: a
    field a later lakelog adds with a default leaves the text of earlier declarations as it
    was."""
    def text(value: Any) -> str:
        if isinstance(value, T.DataType):
            return value.simpleString()
        return str(value) if isinstance(value, PLAIN) else type(value).__name__

    shown = []
    for f in dataclasses.fields(declared):
        value = getattr(declared, f.name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        if f.default_factory is not dataclasses.MISSING and value == f.default_factory():
            continue
        shown.append(f"{f.name}={text(value)}")
    return f"{type(declared).__name__}({', '.join(shown)})"
