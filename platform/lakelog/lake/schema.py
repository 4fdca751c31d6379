"""Spark schemas and Delta schemas: both use the same JSON form, so conversion is exact."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructField, StructType


def spark_schema(delta_json: str) -> StructType:
    return StructType.fromJson(json.loads(delta_json))


def _nullable(node: Any) -> Any:
    """The same schema JSON with every field, element and value nullable."""
    if isinstance(node, dict):
        out = {k: _nullable(v) for k, v in node.items()}
        for key in ("nullable", "containsNull", "valueContainsNull"):
            if key in out:
                out[key] = True
        return out
    if isinstance(node, list):
        return [_nullable(v) for v in node]
    return node


def delta_schema_json(schema: StructType) -> str:
    """Delta schema JSON for `schema`; all nullable, so later writes never trip on nullability."""
    return json.dumps(_nullable(schema.jsonValue()))


def _shape(dtype: DataType) -> Any:
    """A data type without nullability or metadata, for comparing schemas."""
    return _strip(dtype.jsonValue())


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: _strip(v)
            for k, v in node.items()
            if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")
        }
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


_WIDENING = {
    ("byte", "short"), ("byte", "integer"), ("byte", "long"), ("short", "integer"),
    ("short", "long"), ("integer", "long"), ("float", "double"),
}


def widened(actual: StructType, expected: StructType) -> StructType:
    """`actual` with each top-level column whose type safely widens to `expected`'s (int →
    bigint, ...) of that type, as Spark SQL casts on INSERT; other differences are left for
    `describe_mismatch` to report."""
    want = {f.name: f.dataType for f in expected.fields}
    return StructType([
        StructField(f.name, want[f.name], f.nullable)
        if f.name in want and (f.dataType.typeName(), want[f.name].typeName()) in _WIDENING
        else f
        for f in actual.fields
    ])


def widen(df: DataFrame, expected: StructType) -> tuple[DataFrame, StructType]:
    """`df` with its columns cast as `widened` says.

    Returns the frame and its schema, derived here rather than asked of Spark again: over
    Spark Connect every schema look-up is a round trip that re-analyses the whole plan.
    """
    actual = df.schema
    fields = widened(actual, expected)
    if fields == actual:
        return df, actual
    columns = [F.col(f.name).cast(f.dataType).alias(f.name) if f.dataType != g.dataType
               else F.col(f.name) for f, g in zip(fields.fields, actual.fields)]
    return df.select(*columns), fields


def describe_mismatch(*, expected: StructType, actual: StructType) -> str | None:
    """None when `actual` has exactly `expected`'s columns and types (in any order)."""
    want = {f.name: f.dataType for f in expected.fields}
    have = {f.name: f.dataType for f in actual.fields}
    missing = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    wrong = [
        f"{n} is {have[n].simpleString()}, expected {want[n].simpleString()}"
        for n in want
        if n in have and _shape(have[n]) != _shape(want[n])
    ]
    problems = []
    if missing:
        problems.append("missing columns " + ", ".join(missing))
    if extra:
        problems.append("unexpected columns " + ", ".join(extra))
    problems.extend(wrong)
    return "; ".join(problems) or None
