"""A SQL model as declared in its file: name, folder, config and the SQL with its refs.

Names become table paths (``views/<name>``) and Dagster asset keys, so they are checked before
anything is built from them: letters, digits and ``_`` only, which rules out path traversal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Materialized = Literal["view", "table", "incremental"]
PartitionBy = Literal["hour"]

MATERIALIZATIONS: tuple[Materialized, ...] = ("view", "table", "incremental")
PARTITIONINGS: tuple[PartitionBy, ...] = ("hour",)

#: A model or folder name: it becomes a table path segment and part of a Dagster asset key.
NAME = re.compile(r"^[A-Za-z0-9_]+$")
#: The kinds of lakelog table a model may read, by the first segment of their path.
TABLE_KINDS = ("log", "tables", "history", "streams")
#: A lakelog table path: ``<kind>/<name>``, the name as topics allow it (no leading dot).
TABLE_PATH = re.compile(r"^(%s)/[A-Za-z0-9_][A-Za-z0-9_.-]*$" % "|".join(TABLE_KINDS))
#: The column an hour-partitioned model's rows carry their hour in.
HOUR = "hour"
#: SQL functions whose value changes between runs on the same input (clock, randomness).
VOLATILE = re.compile(
    r"\b(current_timestamp|current_date|now|localtimestamp|rand|randn|random|uuid|shuffle)\b"
    r"|\bunix_timestamp\s*\(\s*\)",
    re.IGNORECASE,
)

Range = tuple[float | None, float | None]


@dataclass(frozen=True)
class ModelConfig:
    """The ``{{ config(...) }}`` header.

    `ranges` and `row_count_change` declare the model's warning checks: each column's values
    should lie in ``[low, high]`` (None: unbounded), and the row count should change by at most
    that fraction from the previous version of the table. `expect` adds any Great Expectations
    expectations by name and arguments, e.g. ``('expect_column_values_to_not_be_null',
    {'column': 'query'})``.
    """

    materialized: Materialized = "view"
    unique_key: tuple[str, ...] = ()
    partition_by: PartitionBy | None = None
    ranges: Mapping[str, Range] = field(default_factory=dict)
    row_count_change: float | None = None
    expect: tuple[tuple[str, Mapping[str, Any]], ...] = ()


@dataclass(frozen=True)
class Model:
    """One ``*.sql`` file: `sql` its text, `body` the SQL without the config header (refs as
    written), `template` the body with each ref replaced by ``{ref_<i>}`` (the i-th of `refs`)
    and every other brace doubled, ready for ``spark.sql(template, **frames)``."""

    name: str
    file: str
    folder: str
    sql: str
    body: str
    template: str
    refs: tuple[str, ...]
    config: ModelConfig
    #: The templates of the view models this model reads through (their SQL is inlined into
    #: its query), set when the graph is loaded: editing one changes what this model computes.
    inlined: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        """The Delta table of a stored model (relative to the lake root)."""
        return f"views/{self.name}"

    @property
    def stored(self) -> bool:
        return self.config.materialized != "view"

    @property
    def volatile(self) -> bool:
        """Whether its SQL (or a view it inlines) reads the clock or randomness, so that a run
        on unchanged inputs may give other rows."""
        return any(VOLATILE.search(t) for t in (self.template, *self.inlined))


def ref_path(ref: str) -> str:
    """The table a ref reads when stored: a lakelog table path as is, a model's ``views/<name>``."""
    return ref if "/" in ref else f"views/{ref}"
