"""Parsing a model file: the leading ``{{ config(...) }}`` header and the ``{{ ref('...') }}`` tags.

The tags look like dbt's Jinja but are parsed with `ast` as Python call expressions whose
arguments must be literals, so a model can neither run code nor depend on a template engine.
Only two tags exist: ``config`` (once, before any SQL) and ``ref`` (one string argument).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lakelog.views.errors import ModelError
from lakelog.views.models import (
    HOUR,
    MATERIALIZATIONS,
    NAME,
    PARTITIONINGS,
    TABLE_KINDS,
    TABLE_PATH,
    Model,
    ModelConfig,
    Range,
)

OPEN = re.compile(r"\{\{|\{%|\{#")
CONFIG_KEYS = (
    "materialized", "unique_key", "partition_by", "ranges", "row_count_change", "expect",
)
#: A Great Expectations expectation's name, as GX's docs write it (its class is the CamelCase).
EXPECTATION = re.compile(r"expect_[a-z0-9_]+")


@dataclass(frozen=True)
class _Tag:
    start: int
    end: int
    line: int
    call: ast.Call


def _line(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _tags(text: str, file: str) -> Iterator[_Tag]:
    """Every ``{{ ... }}`` tag: its content is the shortest span up to a ``}}`` that parses."""
    position = 0
    while (found := OPEN.search(text, position)) is not None:
        start, line = found.start(), _line(text, found.start())
        if found.group() != "{{":
            raise ModelError(
                f"{file}: line {line}: Jinja statements and comments are not supported; a model "
                "has only {{ config(...) }} and {{ ref('...') }}"
            )
        error: SyntaxError | None = None
        end = text.find("}}", start + 2)
        while end != -1:
            try:
                node = ast.parse(text[start + 2 : end].strip(), mode="eval").body
                break
            except SyntaxError as exc:
                error = error or exc
                end = text.find("}}", end + 1)
        else:
            snippet = " ".join(text[start : start + 60].split())
            reason = f": {error.msg}" if error else ": no closing }}"
            raise ModelError(f"{file}: line {line}: cannot parse {snippet!r}{reason}")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("config", "ref")):
            raise ModelError(
                f"{file}: line {line}: unknown tag {ast.unparse(node)!r}; a model has only "
                "{{ config(...) }} and {{ ref('...') }}"
            )
        yield _Tag(start, end + 2, line, node)
        position = end + 2


def _literal(node: ast.expr, file: str, line: int, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        raise ModelError(
            f"{file}: line {line}: {what} must be a literal, not {ast.unparse(node)!r}"
        ) from None


def _ref(tag: _Tag, file: str) -> str:
    call = tag.call
    if len(call.args) != 1 or call.keywords:
        raise ModelError(f"{file}: line {tag.line}: ref takes one argument, as in ref('orders')")
    name = _literal(call.args[0], file, tag.line, "a ref")
    if not isinstance(name, str):
        raise ModelError(f"{file}: line {tag.line}: ref needs a string, not {name!r}")
    if not (NAME.fullmatch(name) or TABLE_PATH.fullmatch(name)) or ".." in name:
        raise ModelError(
            f"{file}: line {tag.line}: ref({name!r}) is neither a model name (letters, digits, "
            f"_) nor a lakelog table path <kind>/<name> with kind one of {', '.join(TABLE_KINDS)}"
        )
    return name


def _names(value: Any, file: str, line: int) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (tuple, list)) or not names or not all(
        isinstance(n, str) and n for n in names
    ):
        raise ModelError(
            f"{file}: line {line}: unique_key must be a column name or a list of them"
        )
    return tuple(names)


def _ranges(value: Any, file: str, line: int) -> dict[str, Range]:
    problem = f"{file}: line {line}: ranges must map column names to (low, high), None = open"
    if not isinstance(value, dict):
        raise ModelError(problem)
    ranges = {}
    for column, bounds in value.items():
        if not (isinstance(column, str) and isinstance(bounds, (tuple, list)) and len(bounds) == 2
                and all(b is None or (isinstance(b, (int, float)) and not isinstance(b, bool))
                        for b in bounds)):
            raise ModelError(problem)
        low, high = bounds
        if low is not None and high is not None and low > high:
            raise ModelError(f"{file}: line {line}: range of {column} has low > high")
        ranges[column] = (low, high)
    return ranges


def _expect(value: Any, file: str, line: int) -> tuple[tuple[str, dict[str, Any]], ...]:
    problem = (f"{file}: line {line}: expect must be a list of (expectation name, arguments), "
               "e.g. [('expect_column_values_to_not_be_null', {'column': 'id'})]")
    if not isinstance(value, (list, tuple)):
        raise ModelError(problem)
    found = []
    for item in value:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], dict) and all(isinstance(k, str) for k in item[1])):
            raise ModelError(problem)
        if not EXPECTATION.fullmatch(item[0]):
            raise ModelError(f"{file}: line {line}: {item[0]!r} is not an expectation name "
                             "(expect_..., as in Great Expectations)")
        found.append((item[0], dict(item[1])))
    return tuple(found)


def _config(tag: _Tag, file: str) -> ModelConfig:
    call, line = tag.call, tag.line
    if call.args:
        raise ModelError(f"{file}: line {line}: config takes keyword arguments only")
    values: dict[str, Any] = {}
    for keyword in call.keywords:
        if keyword.arg not in CONFIG_KEYS:
            raise ModelError(
                f"{file}: line {line}: unknown config key {keyword.arg!r}; known: "
                + ", ".join(CONFIG_KEYS)
            )
        values[keyword.arg] = _literal(keyword.value, file, line, f"config {keyword.arg}")
    materialized = values.get("materialized", "view")
    if materialized not in MATERIALIZATIONS:
        raise ModelError(
            f"{file}: line {line}: materialized={materialized!r} is not one of "
            + ", ".join(MATERIALIZATIONS)
        )
    unique_key = _names(values["unique_key"], file, line) if "unique_key" in values else ()
    partition_by = values.get("partition_by")
    if partition_by is not None and partition_by not in PARTITIONINGS:
        raise ModelError(f"{file}: line {line}: partition_by={partition_by!r} is not 'hour'")
    if materialized == "incremental" and not unique_key:
        raise ModelError(f"{file}: line {line}: an incremental model needs a unique_key")
    if materialized != "incremental" and (unique_key or partition_by):
        raise ModelError(
            f"{file}: line {line}: unique_key and partition_by apply to incremental models only"
        )
    if partition_by == "hour" and HOUR not in unique_key:
        raise ModelError(
            f"{file}: line {line}: partition_by='hour' needs the column {HOUR!r} in unique_key"
        )
    change = values.get("row_count_change")
    if change is not None:
        if not isinstance(change, (int, float)) or isinstance(change, bool) or change <= 0:
            raise ModelError(f"{file}: line {line}: row_count_change must be a number > 0")
        if materialized == "view":
            raise ModelError(
                f"{file}: line {line}: row_count_change needs a stored model (table or "
                "incremental); a view keeps no previous version"
            )
    return ModelConfig(
        materialized=materialized,
        unique_key=unique_key,
        partition_by=partition_by,
        ranges=_ranges(values.get("ranges", {}), file, line),
        row_count_change=None if change is None else float(change),
        expect=_expect(values.get("expect", ()), file, line),
    )


def parse_model(text: str, *, name: str, file: str, folder: str) -> Model:
    """The model in `text` (the contents of `file`); `name` and `folder` are already checked."""
    config = ModelConfig()
    refs: list[str] = []
    body_parts: list[str] = []
    template_parts: list[str] = []
    position = 0
    for index, tag in enumerate(_tags(text, file)):
        before = text[position : tag.start]
        body_parts.append(before)
        template_parts.append(before.replace("{", "{{").replace("}", "}}"))
        position = tag.end
        if tag.call.func.id == "config":  # type: ignore[attr-defined]
            if index > 0 or _without_comments(before):
                raise ModelError(
                    f"{file}: line {tag.line}: config(...) must come first, before any SQL"
                )
            config = _config(tag, file)
            blank = "\n" * text.count("\n", tag.start, tag.end)  # Spark's line numbers = the file's
            body_parts.append(blank)
            template_parts.append(blank)
            continue
        ref = _ref(tag, file)
        if ref not in refs:
            refs.append(ref)
        body_parts.append(text[tag.start : tag.end])
        template_parts.append(f"{{ref_{refs.index(ref)}}}")
    rest = text[position:]
    body_parts.append(rest)
    template_parts.append(rest.replace("{", "{{").replace("}", "}}"))
    body = _statement("".join(body_parts))
    template = _statement("".join(template_parts))
    if not _without_comments(body):
        raise ModelError(f"{file}: the model has no SQL after its config")
    return Model(
        name=name, file=file, folder=folder, sql=text, body=body,
        template=template if refs else body, refs=tuple(refs), config=config,
    )


def _statement(sql: str) -> str:
    """One statement: trailing blanks and semicolon removed; leading lines kept, so that the
    line numbers in Spark's messages are the file's."""
    return sql.rstrip().rstrip(";").rstrip()


def _without_comments(sql: str) -> str:
    """`sql` without blank and ``--`` comment lines: what may precede the config header."""
    return "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--")).strip()


def check_name(value: str, *, file: str, what: str) -> str:
    if not NAME.fullmatch(value):
        raise ModelError(
            f"{file}: {what} {value!r} may use only letters, digits and _ (it becomes a table "
            "path and a Dagster asset key)"
        )
    return value

