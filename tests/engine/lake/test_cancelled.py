"""A change feed's inserts and deletes of the same row in one version cancel out, by pyarrow."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from lakelog.lake.changes import _cancelled_arrow, _row_codes


def _by_row(rows: pa.Table, names: list[str]) -> pa.Table:
    """The multiset difference row by row in Python: what `_cancelled_arrow` must equal."""
    values = [json.dumps(r, sort_keys=True, default=str)
              for r in rows.select(names).to_pylist()]
    kinds, versions = rows["_change_type"].to_pylist(), rows["_commit_version"].to_pylist()
    total = Counter(zip(versions, values, kinds))
    seen: Counter = Counter()
    keep = []
    for version, value, kind in zip(versions, values, kinds):
        seen[version, value, kind] += 1
        other = "delete" if kind == "insert" else "insert"
        keep.append(seen[version, value, kind] > total[version, value, other])
    return rows.filter(pa.array(keep, pa.bool_()))


SCHEMA = pa.schema([
    ("id", pa.int64()), ("name", pa.string()), ("price", pa.float64()),
    ("at", pa.timestamp("us", tz="UTC")), ("tags", pa.map_(pa.string(), pa.string())),
    ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
    ("_change_type", pa.string()), ("_commit_version", pa.int64()),
    ("_commit_timestamp", pa.timestamp("us", tz="UTC")),
])
NAMES = SCHEMA.names[:6]


def _random_feed(rng: random.Random, n: int) -> pa.Table:
    """`n` changes over a few versions drawn from few values, nulls and nested ones among
    them, so that many rows meet their twin of the other kind (or several twins)."""
    stamp = datetime(2026, 12, 5, tzinfo=timezone.utc)
    values = [
        {"id": rng.choice([1, 2, None]), "name": rng.choice(["a", "b", None]),
         "price": rng.choice([1.5, 2.0, None]), "at": rng.choice([stamp, None]),
         "tags": rng.choice([[("k", "1")], [("k", "2")], None]),
         "address": rng.choice([{"city": "x", "zip": 1}, {"city": None, "zip": 1}, None])}
        for _ in range(6)
    ]
    rows = [{**rng.choice(values), "_change_type": rng.choice(["insert", "delete"]),
             "_commit_version": rng.choice([3, 4]), "_commit_timestamp": stamp}
            for _ in range(n)]
    table = pa.Table.from_pylist(rows, SCHEMA)
    # Several chunks, as a feed read file by file is.
    return pa.concat_tables([table.slice(0, n // 3), table.slice(n // 3)])


def test_cancelled_equals_the_row_by_row_difference():
    rng = random.Random(7)
    for n in (1, 2, 5, 40, 300):
        for _ in range(20):
            feed = _random_feed(rng, n)
            assert _cancelled_arrow(feed, NAMES).to_pylist() == \
                _by_row(feed, NAMES).to_pylist(), n


def test_a_rewritten_file_cancels_and_the_changed_row_stays():
    """A copy-on-write rewrite: the file's unchanged rows leave and come back in one version
    (nothing), its changed row leaves as a delete and comes back as an insert; a row deleted
    and added again in another version is two changes of that version's own."""
    stamp = datetime(2026, 12, 5, tzinfo=timezone.utc)

    def change(i: int, name: str, kind: str, version: int = 2) -> dict:
        return {"id": i, "name": name, "price": None, "at": None, "tags": None,
                "address": None, "_change_type": kind, "_commit_version": version,
                "_commit_timestamp": stamp}

    feed = pa.Table.from_pylist([
        change(1, "a", "delete"), change(2, "b", "delete"), change(3, "c", "delete"),
        change(1, "a", "insert"), change(2, "B", "insert"), change(3, "c", "insert"),
        change(3, "c", "insert", version=3),
    ], SCHEMA)
    kept = _cancelled_arrow(feed, NAMES)
    assert [(r["id"], r["name"], r["_change_type"], r["_commit_version"])
            for r in kept.to_pylist()] == [
        (2, "b", "delete", 2), (2, "B", "insert", 2), (3, "c", "insert", 3)]
    assert _cancelled_arrow(feed.slice(0, 0), NAMES).num_rows == 0


def test_null_structs_are_one_value_whatever_their_fields_hold():
    """A null struct's fields may hold anything underneath: two null structs are equal."""
    stamp = datetime(2026, 12, 5, tzinfo=timezone.utc)
    address = pa.StructArray.from_arrays(
        [pa.array(["x", "y"]), pa.array([1, 2], pa.int32())], names=["city", "zip"],
        mask=pa.array([True, True]))
    feed = pa.table({"address": address, "_change_type": ["delete", "insert"],
                     "_commit_version": pa.array([2, 2], pa.int64()),
                     "_commit_timestamp": pa.array([stamp, stamp], SCHEMA.field("at").type)})
    assert _cancelled_arrow(feed, ["address"]).num_rows == 0


def test_row_codes_of_wide_columns_made_dense_before_they_overflow():
    """Columns whose codes multiplied together pass 2**63 still give equal codes exactly to
    equal rows."""
    rng = np.random.default_rng(3)
    columns = [rng.integers(0, 3, 200) * (2**40) for _ in range(3)]  # widths of 2**41 each
    codes = _row_codes(columns)
    rows = list(zip(*(c.tolist() for c in columns)))
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (codes[i] == codes[j]) == (rows[i] == rows[j])
    assert codes.min() == 0 and codes.max() == len(set(rows)) - 1


def test_nans_of_any_bits_are_one_value():
    """A NaN whose bits differ between its delete and its insert still cancels, as their
    JSON text ("NaN") did."""
    stamp = datetime(2026, 12, 5, tzinfo=timezone.utc)
    bits = np.array([0x7FF8000000000001, 0x7FF8000000000000], dtype=np.uint64)
    price = pa.array(bits.view(np.float64))
    feed = pa.table({"price": price, "_change_type": ["delete", "insert"],
                     "_commit_version": pa.array([2, 2], pa.int64()),
                     "_commit_timestamp": pa.array([stamp, stamp], SCHEMA.field("at").type)})
    assert _cancelled_arrow(feed, ["price"]).num_rows == 0
