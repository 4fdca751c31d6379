"""Who a data subject is in lakelog's tables and files: the columns that hold their identifier.

A pipeline names its subject columns once (`Pipeline.subject_columns`, e.g. ``user_id`` and
``customer_id``). A row belongs to subject ``s`` when one of those columns equals ``s``, at the
top level or as a field of a top-level struct (a change event's ``before`` and ``after``); values
are compared as text, so ``42`` finds a ``bigint`` customer id. Text that could not be parsed (a
dead letter's ``raw``, a malformed landing line) belongs to ``s`` when it contains ``s`` as a
whole token: not preceded or followed by a letter, digit or ``_``, so ``u4`` does not find
``u42``.

The erasure record keeps `subject_hash` — SHA-256 of a random salt and the subject — which
proves to whoever knows the subject that it was erased, and lets a check find any value that
hashes to it, without the record holding the subject itself.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping
from functools import reduce
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T


def subject_fields(schema: T.StructType, names: Collection[str]) -> list[str]:
    """The columns of `schema` named one of `names`: top-level ones and fields of top-level
    structs (as ``before.customer_id``)."""
    found = []
    for field in schema.fields:
        if field.name in names:
            found.append(field.name)
        elif isinstance(field.dataType, T.StructType):
            found += [f"{field.name}.{f.name}" for f in field.dataType.fields if f.name in names]
    return found


def _any(conditions: list[Column]) -> Column | None:
    return reduce(lambda a, b: a | b, conditions) if conditions else None


def subject_filter(schema: T.StructType, names: Collection[str], subject: str) -> Column | None:
    """True for the rows of subject `subject` (None when the schema holds no subject column)."""
    return _any([F.coalesce(F.col(c).cast("string") == F.lit(subject), F.lit(False))
                 for c in subject_fields(schema, names)])


def token_pattern(subject: str) -> str:
    """A regular expression that finds `subject` as a whole token in text."""
    return rf"(?<![A-Za-z0-9_]){re.escape(subject)}(?![A-Za-z0-9_])"


def text_filter(column: str, subject: str) -> Column:
    """True for the rows whose text `column` mentions `subject` as a whole token."""
    return F.coalesce(F.col(column).rlike(token_pattern(subject)), F.lit(False))


def _holds(record: Mapping[str, Any], names: Collection[str], subject: str) -> bool:
    for name, value in record.items():
        if isinstance(value, Mapping):
            if any(k in names and _same(v, subject) for k, v in value.items()):
                return True
        elif name in names and _same(value, subject):
            return True
    return False


def _same(value: Any, subject: str) -> bool:
    return value is not None and not isinstance(value, (dict, list)) and (
        str(value).lower() if isinstance(value, bool) else str(value)) == subject


def line_holds(line: str, names: Collection[str], subject: str) -> bool:
    """Whether a landing NDJSON line is subject `subject`'s: a JSON object with a subject
    column of that value (top level or one level down), or any other text mentioning it."""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if isinstance(record, Mapping):
        return _holds(record, names, subject)
    return re.search(token_pattern(subject), line) is not None


def subject_hash(subject: str, salt: str) -> str:
    """SHA-256 (hex) of `salt` and `subject`: what the erasure record keeps of the subject."""
    return hashlib.sha256(f"{salt}{subject}".encode()).hexdigest()


def hash_column(column: Column, salt: str) -> Column:
    """`subject_hash` of each value of `column`, computed by Spark."""
    return F.sha2(F.concat(F.lit(salt), column.cast("string")), 256)
