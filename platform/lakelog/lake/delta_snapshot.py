"""A Delta table version as delta-rs loads it: schema, properties, data files with statistics.

`EmbeddedLake.snapshot` returns one. A version never changes, so its file list, parsed from the
add actions delta-rs gives, is kept with the loaded table, which the lakes of a process share
while it is current (`lakelog.lake.loaded_tables`). A table on an object store is loaded anew
each time, and its list parsed with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from pyspark.sql.types import StructType

from lakelog.errors import ConcurrentWriteError
from lakelog.lake.base import DataFile
from lakelog.lake.schema import spark_schema


class DeltaSnapshot:
    """A Delta table loaded at one version by delta-rs."""

    def __init__(
        self, path: str, table: DeltaTable, *, log_holds: Callable[[int], bool] | None = None,
    ) -> None:
        """`log_holds`: whether the table's log still holds a version's commit (a lake's
        `forget_history` deletes those before a version), to tell a version forgotten since it
        was loaded from other errors of delta-rs."""
        self.path = path
        self.table = table
        self.version: int = table.version()
        self._log_holds = log_holds

    @property
    def schema(self) -> StructType:
        return spark_schema(self.table.schema().to_json())

    @property
    def arrow_schema(self) -> pa.Schema:
        """The table's schema in Arrow types, as delta-rs maps them (what pyarrow reads and
        writes its files in)."""
        return pa.schema(self.table.schema().to_arrow())

    @property
    def partition_columns(self) -> list[str]:
        return list(self.table.metadata().partition_columns)

    @property
    def table_id(self) -> str:
        return self.table.metadata().id

    @property
    def properties(self) -> Mapping[str, str]:
        return dict(self.table.metadata().configuration)

    def files(self) -> list[DataFile]:
        """The version's data files, parsed once per loaded table."""
        found = _PARSED.get(id(self.table))
        if found is None:
            found = _data_files(pa.table(self.table.get_add_actions(flatten=True)))
            # The entry leaves with the table: the finalizer first, so no entry is left behind.
            weakref.finalize(self.table, _PARSED.pop, id(self.table), None).atexit = False
            _PARSED[id(self.table)] = found
        return list(found)

    def forgotten(self) -> bool:
        """Whether the table's log no longer holds this version's commit (False when the
        snapshot was not told how to look)."""
        return self._log_holds is not None and not self._log_holds(self.version)

    def txn_version(self, app_id: str) -> int | None:
        try:
            return self.table.transaction_version(app_id)
        except DeltaError as exc:  # delta-rs reads a loaded version's transactions lazily
            if not self.forgotten():
                raise
            raise ConcurrentWriteError(
                f"the Delta log of {self.path} through version {self.version}, read before, "
                "was forgotten meanwhile (an erasure's clean-up): read the table again"
            ) from exc


#: The file lists of the loaded tables alive, by the table object's id (a `DeltaTable` is not
#: hashable): an entry leaves with its table, before the id can be another's.
_PARSED: dict[int, list[DataFile]] = {}


def _data_files(actions: pa.Table) -> list[DataFile]:
    names = actions.column_names
    groups: dict[str, list[tuple[str, str]]] = {
        "min": [], "max": [], "partition": [], "null_count": []}
    for name in names:
        prefix, _, column = name.partition(".")
        if prefix in groups and column:
            groups[prefix].append((name, column))
    files = []
    for row in actions.to_pylist():
        files.append(
            DataFile(
                path=unquote(row["path"]),  # as on disk: the log percent-encodes it
                size=row["size_bytes"],
                num_records=row.get("num_records") or 0,
                partition_values={c: row[n] for n, c in groups["partition"]},
                min_values={c: row[n] for n, c in groups["min"] if row[n] is not None},
                max_values={c: row[n] for n, c in groups["max"] if row[n] is not None},
                modification_time=row["modification_time"],
                null_counts={c: row[n] for n, c in groups["null_count"] if row[n] is not None},
            )
        )
    return files
