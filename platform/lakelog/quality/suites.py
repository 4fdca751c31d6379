"""The Great Expectations suites lakelog attaches to its tables and models.

Suites of lakelog's own tables follow from their declarations, so a declared topic, compacted
table or history table is guarded without writing a suite by hand; they block downstream work.
A model's suite follows from its config header (``ranges``, ``row_count_change``, and the
``unique_key`` of an incremental model); it only warns.

Checks that compare rows with their neighbours (offsets contiguous, validity intervals not
overlapping) are queries over ``{batch}``, GX's name for the frame, in `ExpectNoUnexpectedRows`
(`lakelog.quality.rows`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import StructType

from lakelog.cdc.compacted import CompactedTable
from lakelog.cdc.history import HistoryTable
from lakelog.errors import ConfigError
from lakelog.log.topics import Topic
from lakelog.quality import names
from lakelog.quality.gx import Expectation, gxe
from lakelog.quality.rows import ExpectNoUnexpectedRows
from lakelog.views.models import Model


@dataclass(frozen=True)
class Suite:
    """A named list of GX expectations over one DataFrame.

    `index_columns` identify an unexpected row in the samples (e.g. partition and offset).
    """

    name: str
    expectations: tuple[Expectation, ...]
    blocking: bool
    index_columns: tuple[str, ...] = ()
    description: str | None = None


def _quoted(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def _unique(columns: Sequence[str], **options: str) -> Expectation:
    if len(columns) == 1:
        return gxe.ExpectColumnValuesToBeUnique(column=columns[0], **options)
    return gxe.ExpectCompoundColumnsToBeUnique(column_list=list(columns), **options)


def gx_column_names(schema: StructType, parent: str = "") -> list[str]:
    """The column list GX reports for a Spark frame of `schema`: every field, and after a
    struct field its nested fields as ``parent.child`` (GX's ``table.columns`` metric includes
    nested fields, so the ordered-list expectation must list them too)."""
    names: list[str] = []
    for field in schema.fields:
        name = f"`{field.name}`" if "." in field.name else field.name
        names.append(parent + name)
        if isinstance(field.dataType, StructType):
            names.extend(gx_column_names(field.dataType, f"{parent}{field.name}."))
    return names


#: A row whose offset does not follow the one before it in its log partition: one after a
#: gap, a repeat of the one before (equal offsets sort next to each other), or none at all.
NOT_FOLLOWING = "`offset` > previous_offset + 1 OR `offset` = previous_offset OR `offset` IS NULL"

#: The rows of the frame (GX's ``{batch}``) whose offset does not follow (`NOT_FOLLOWING`).
CONTIGUOUS_OFFSETS = """
SELECT `partition`, previous_offset, `offset` FROM (
    SELECT `partition`, `offset`,
           lag(`offset`) OVER (PARTITION BY `partition` ORDER BY `offset`) AS previous_offset
    FROM {batch}
) WHERE """ + NOT_FOLLOWING + "\n"


#: `CONTIGUOUS_OFFSETS` for rows appended after rows already checked: per log partition, the
#: first new offset follows the last one checked, none is at or before it, none repeats, and
#: none is missing.
CONTIGUOUS_AFTER = """
SELECT `partition`, previous_offset, `offset` FROM (
    SELECT b.`partition`, b.`offset`, c.last_checked, coalesce(
               lag(b.`offset`) OVER (PARTITION BY b.`partition` ORDER BY b.`offset`),
               c.last_checked) AS previous_offset
    FROM {{batch}} b LEFT JOIN (VALUES {checked}) AS c(`partition`, last_checked)
         ON b.`partition` = c.`partition`
) WHERE """ + NOT_FOLLOWING + " OR `offset` <= last_checked\n"


def topic_suite(
    topic: Topic, *, checked: Mapping[int, int] | None = None, erased: bool = False
) -> Suite:
    """The topic table's schema, non-null key and event id, offsets unique per log partition
    and, unless the topic is compacted or had records `erased` (both leave gaps), contiguous
    from the log start: then both in one query (`CONTIGUOUS_OFFSETS`), else uniqueness by GX's
    compound-unique expectation.

    `checked` are, per log partition, the heads of the rows already checked: the suite then
    validates the rows appended since (offsets unique among them, and contiguous from there;
    where gaps are allowed, unique among them only).
    """
    schema = topic.table_schema
    expectations: list[Expectation] = [
        gxe.ExpectTableColumnsToMatchOrderedList(column_list=gx_column_names(schema)),
        *(gxe.ExpectColumnValuesToBeOfType(column=f.name, type_=type(f.dataType).__name__)
          for f in schema.fields),
        gxe.ExpectColumnValuesToNotBeNull(column="key"),
        gxe.ExpectColumnValuesToNotBeNull(column="event_id"),
    ]
    gaps = topic.compaction is not None or erased
    if gaps:
        expectations.append(_unique(["partition", "offset"]))
    else:
        query = CONTIGUOUS_OFFSETS
        if checked:
            values = ", ".join(f"({p}, {h - 1})" for p, h in sorted(checked.items()))
            query = CONTIGUOUS_AFTER.format(checked=values)
        expectations.append(ExpectNoUnexpectedRows(
            unexpected_rows_query=query,
            description="offsets are unique and contiguous per log partition: none is "
            "null or repeated, and none is missing between the log-start offset and the head",
        ))
    return Suite(
        names.TOPIC_CHECK, tuple(expectations), blocking=True,
        index_columns=("partition", "offset"),
        description=f"log/{topic.name}: schema, non-null key and event id, offsets unique"
        + (" and contiguous" if not gaps else
           f" ({'compacted' if topic.compaction else 'records erased'}: gaps allowed)"),
    )


def compacted_suite(table: CompactedTable) -> Suite:
    """One row per primary key."""
    return Suite(
        names.COMPACTED_CHECK, (_unique(table.key),), blocking=True,
        index_columns=(*table.key, "_position"),
        description=f"{table.path}: primary key {', '.join(table.key)} unique",
    )


def history_suite(table: HistoryTable) -> Suite:
    """One current row per key, and validity intervals of a key that do not overlap."""
    keys = ", ".join(_quoted(k) for k in table.key)
    overlaps = f"""
SELECT {keys}, valid_from, valid_to, next_valid_from FROM (
    SELECT *, lead(valid_from) OVER (PARTITION BY {keys} ORDER BY valid_from, _position)
              AS next_valid_from
    FROM {{batch}}
) WHERE (next_valid_from IS NOT NULL AND (valid_to IS NULL OR valid_to > next_valid_from))
     OR valid_to < valid_from
"""
    return Suite(
        names.HISTORY_CHECK,
        (
            _unique(table.key, row_condition="is_current", condition_parser="spark"),
            ExpectNoUnexpectedRows(
                unexpected_rows_query=overlaps,
                description="the validity intervals of a key do not overlap",
            ),
        ),
        blocking=True,
        index_columns=(*table.key, "valid_from"),
        description=f"{table.path}: one current row per key, validity intervals not overlapping",
    )


def row_count_bounds(previous: int, change: float) -> tuple[int, int]:
    """Counts within a factor ``1 + change`` of `previous`, either way:
    ``[previous / (1 + change), previous * (1 + change)]``."""
    return math.floor(previous / (1 + change)), math.ceil(previous * (1 + change))


def model_suites(model: Model, *, previous_rows: int | None) -> list[Suite]:
    """The warning suites `model` declares (see `names.model_checks`). `previous_rows` is the
    row count of the table's previous version (None or 0: nothing to compare with)."""
    config = model.config
    key = tuple(c for c in config.unique_key)
    suites = []
    if config.ranges:
        suites.append(Suite(
            names.VALUE_RANGES,
            tuple(gxe.ExpectColumnValuesToBeBetween(column=c, min_value=lo, max_value=hi)
                  for c, (lo, hi) in config.ranges.items()),
            blocking=False, index_columns=key,
            description="values within the ranges declared in the config header",
        ))
    if config.row_count_change is not None:
        if previous_rows:
            low, high = row_count_bounds(previous_rows, config.row_count_change)
            suites.append(Suite(
                names.ROW_COUNT_CHANGE,
                (gxe.ExpectTableRowCountToBeBetween(min_value=low, max_value=high),),
                blocking=False,
                description=f"row count within a factor {1 + config.row_count_change:g} of the "
                f"previous version's {previous_rows}",
            ))
        else:
            suites.append(Suite(names.ROW_COUNT_CHANGE, (), blocking=False,
                                description="no previous version with rows to compare with"))
    if config.unique_key:
        suites.append(Suite(names.UNIQUE_KEY, (_unique(key),), blocking=False, index_columns=key,
                            description=f"unique_key {', '.join(key)} unique"))
    if config.expect:
        suites.append(Suite(
            names.EXPECTATIONS, tuple(expectation(model, n, a) for n, a in config.expect),
            blocking=False, index_columns=key,
            description="the expectations declared in the config header",
        ))
    return suites


def expectation(model: Model, name: str, arguments: Mapping[str, Any]) -> Expectation:
    """GX's expectation `name` (snake_case, as GX's docs write it) with `arguments`."""
    cls = getattr(gxe, "".join(part.title() for part in name.split("_")), None)
    if not (isinstance(cls, type) and issubclass(cls, Expectation)):
        raise ConfigError(f"{model.file}: {name!r} is not a Great Expectations expectation")
    try:
        return cls(**arguments)
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise ConfigError(f"{model.file}: {name}{dict(arguments)}: {exc}") from None
