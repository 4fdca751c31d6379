"""The embedded Delta engine: Spark reads and writes the Parquet files, delta-rs commits.

A write puts its files into the table's folder (`lakelog.lake.data_files`: by pyarrow when few,
else by Spark through a staging folder) with their footers' Delta statistics; delta-rs commits
all adds and removes as one transaction relative to the snapshot the caller read, with the
caller's application transactions (`lakelog.lake.delta_commit`). Files of a failed commit are
deleted again, so a failed write leaves nothing behind.
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.dataset as pads
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.exceptions import TableNotFoundError as DeltaTableNotFound
from deltalake.transaction import AddAction, CommitProperties
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakelog.errors import ConcurrentWriteError, SchemaMismatchError, TableNotFoundError
from lakelog.lake.base import AppTxn, CommitMetadata, DataFile, WriteMode
from lakelog.lake import (
    change_feed, data_files, delta_commit, driver_write, forgetting, held_read, loaded_tables,
)
from lakelog.lake.changes import partition_types_held
from lakelog.lake.delta_snapshot import DeltaSnapshot
from lakelog.lake.files_dataset import files_dataset
from lakelog.lake.merge_on_read import FILE, current_rows, merge_keys
from lakelog.lake.one_partition import few, one_partition
from lakelog.lake.schema import delta_schema_json, describe_mismatch

TABLE_DEFAULTS = {
    # lakelog writes footer stats for every top-level column; without this, readers keep only
    # the first 32 leaf columns' (nested ones count), and a wide payload would hide
    # `ingest_time` from retention and compaction.
    "delta.dataSkippingNumIndexedCols": "-1",
    # A checkpoint every 10 commits, not Delta's 100: a microbatch loads about 20 snapshots
    # and commits 4-6 times, and each load replays the JSON commits since the last
    # checkpoint (measured: 13 ms a load at interval 100, 4.6 ms at 10).
    "delta.checkpointInterval": "10",
}


class EmbeddedLake:
    """Delta tables under `root` (a local path or an object-store URI), computed by `spark`."""

    def __init__(
        self,
        spark: SparkSession | Callable[[], SparkSession],
        root: str,
        *,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        """`spark` may be a factory: metadata-only work (offsets, heads, lag) never starts Spark."""
        self._spark = spark
        self._spark_ready = False
        if "://" in root:
            self.root = root.rstrip("/")
            self.fs, self._fs_root = pafs.FileSystem.from_uri(self.root)
        else:
            self.root = os.path.abspath(root)
            self.fs, self._fs_root = pafs.LocalFileSystem(), self.root
        self._storage_options = dict(storage_options or {})
        self._local = isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def spark(self) -> SparkSession:
        if not self._spark_ready:
            if callable(self._spark):  # a factory (a session, classic or Connect, is not)
                self._spark = self._spark()
            # Delta readers other than Spark need standard (not INT96) Parquet timestamps: a
            # session lakelog built has them already (a conf set is a round trip over Connect).
            from lakelog.spark.session import has_required_conf  # Spark Connect's client too

            if not has_required_conf(self._spark):
                self._spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
            self._spark_ready = True
        return self._spark

    def uri(self, path: str) -> str:
        return f"{self.root}/{path}"

    def fs_path(self, path: str) -> str:
        return f"{self._fs_root}/{path}"

    def spark_path(self, path: str) -> str:
        uri = self.uri(path)
        return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri

    def _delta(self, path: str, version: int | None = None) -> DeltaTable:
        """Table `path` at `version` (None: the latest), loaded again only when its log has
        changed (`lakelog.lake.loaded_tables`). Not for operations that move the object."""
        if not self._local:
            return self._load(path, version)
        return loaded_tables.LOADED.get(
            self.fs_path(f"{path}/_delta_log"), version, lambda: self._load(path, version))

    def _load(self, path: str, version: int | None = None) -> DeltaTable:
        try:
            return DeltaTable(self.uri(path), version=version, storage_options=self._storage_options)
        except DeltaTableNotFound as exc:
            raise TableNotFoundError(f"no Delta table at {self.uri(path)}") from exc

    def exists(self, path: str) -> bool:
        if self._local and loaded_tables.LOADED.holds(self.fs_path(f"{path}/_delta_log")):
            return True
        return DeltaTable.is_deltatable(self.uri(path), storage_options=self._storage_options)

    def create_table(
        self,
        path: str,
        schema: StructType,
        *,
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
    ) -> DeltaSnapshot:
        if not self.exists(path):
            try:
                DeltaTable.create(
                    self.uri(path),
                    DeltaSchema.from_json(delta_schema_json(schema)),
                    mode="ignore",
                    partition_by=list(partition_by) or None,
                    configuration={**TABLE_DEFAULTS, **(properties or {})},
                    storage_options=self._storage_options,
                    # A losing concurrent creator must not retry its create as version 1: that
                    # metadata change would fail every writer that read version 0.
                    commit_properties=CommitProperties(max_commit_retries=0),
                    raise_if_key_not_exists=False,  # lakelog's own properties (lakelog.*)
                )
            except CommitFailedError:
                pass  # another writer created it first; the schema check below still applies
        existing = self.snapshot(path)
        problem = describe_mismatch(expected=existing.schema, actual=schema)
        if problem:
            raise SchemaMismatchError(f"table {path} exists with another schema: {problem}")
        return existing

    def replace_table(self, path: str, schema: StructType) -> None:
        if not self.exists(path):
            raise TableNotFoundError(f"table {path} does not exist")
        table = self._delta(path)
        try:
            DeltaTable.create(
                self.uri(path),
                DeltaSchema.from_json(delta_schema_json(schema)),
                mode="overwrite",
                partition_by=list(table.metadata().partition_columns) or None,
                configuration=dict(table.metadata().configuration),
                storage_options=self._storage_options,
                raise_if_key_not_exists=False,
            )
        except CommitFailedError as exc:
            # Another writer committed first. Two runs of one rebuild both replacing the table:
            # the other made it what this one would have, a new table with these columns.
            now = self.snapshot(path)
            if now.table_id != table.metadata().id and not describe_mismatch(
                    expected=now.schema, actual=schema):
                return
            raise ConcurrentWriteError(
                f"another writer committed to {path} while it was being replaced; nothing "
                "was written") from exc

    def snapshot(self, path: str, version: int | None = None) -> DeltaSnapshot:
        return DeltaSnapshot(path, self._delta(path, version), log_holds=lambda v: (
            delta_commit.log_holds(self.fs, self.fs_path(path), v)))

    def read(
        self,
        snapshot: DeltaSnapshot,
        *,
        files: Sequence[DataFile] | None = None,
        keys: DataFrame | None = None,
        key_columns: Sequence[str] | None = None,
        all_versions: bool = False,
        file_paths: bool = False,
    ) -> DataFrame:
        merge = merge_keys(snapshot.properties)
        if merge is None or all_versions or file_paths:
            chosen = snapshot.files() if files is None else files
            rows = self._read_files(snapshot, chosen, with_file=file_paths, full_path=True)
            if keys is None:
                return rows
            return rows.join(keys, list(key_columns or keys.columns), "left_semi")

        def read_files(chosen: Sequence[DataFile]) -> DataFrame:
            return self._read_files(snapshot, chosen, with_file=True)

        return current_rows(read_files, snapshot.files(), files, merge, keys)

    def _read_files(
        self, snapshot: DeltaSnapshot, files: Sequence[DataFile], *, with_file: bool = False,
        full_path: bool = False,
    ) -> DataFrame:
        spark, schema = self.spark, snapshot.schema  # a Column needs a started session
        columns = [F.col(c) for c in schema.fieldNames()]
        if with_file:
            name = "_metadata.file_path" if full_path else "_metadata.file_name"
            columns.append(F.col(name).alias(FILE))
        if not files:
            empty = spark.createDataFrame([], schema)
            return empty.withColumn(FILE, F.lit(None).cast("string")) if with_file else empty
        base = self.spark_path(snapshot.path)
        reader = spark.read.schema(schema).option("basePath", base)
        rows = reader.parquet(*[f"{base}/{f.path}" for f in files]).select(*columns)
        return one_partition(rows) if few(files) else rows

    def write(
        self,
        snapshot: DeltaSnapshot,
        df: DataFrame | None,
        *,
        mode: WriteMode = "append",
        remove: Sequence[DataFile] = (),
        txns: Sequence[AppTxn] = (),
        metadata: CommitMetadata | None = None,
        max_records_per_file: int | None = None,
        rows_hint: int | None = None,
        sort_by: Sequence[str] = (),
    ) -> int:
        removed = list(snapshot.files()) if mode == "overwrite" else list(remove)
        adds = [] if df is None else self._write_files(snapshot, df, max_records_per_file,
                                                        rows_hint, sort_by)
        if callable(metadata):
            metadata = metadata(sum(json.loads(a.stats)["numRecords"] for a in adds))
        return self._commit(snapshot, adds, removed, txns, metadata)

    def read_arrow(
        self,
        snapshot: DeltaSnapshot,
        *,
        files: Sequence[DataFile] | None = None,
        columns: Sequence[str] | None = None,
        where: pads.Expression | None = None,
    ) -> pa.Table:
        schema = snapshot.arrow_schema
        names = list(columns or schema.names)
        if files is None:  # by pyarrow's filesystem, not delta-rs's Python files (loaded_tables)
            files, named = snapshot.files(), [c for c in snapshot.partition_columns if c in names]
            if not partition_types_held(schema, named):
                return snapshot.table.to_pyarrow_dataset().to_table(
                    columns=None if columns is None else list(columns), filter=where)
        else:
            named = [c for c in snapshot.partition_columns if columns and c in columns]
        if not files:
            return pa.schema([schema.field(c) for c in names]).empty_table()
        data = files_dataset(self.fs, self.fs_path(snapshot.path), files, schema, named,
                             table=snapshot.path)
        return data.to_table(columns=names, filter=where)

    def write_table(
        self,
        snapshot: DeltaSnapshot,
        table: pa.Table,
        *,
        remove: Sequence[DataFile] = (),
        txns: Sequence[AppTxn] = (),
        metadata: CommitMetadata | None = None,
        max_records_per_file: int | None = None,
        sort_by: Sequence[str] = (),
    ) -> int:
        if sort_by:
            table = driver_write.sorted_rows(table, sort_by)
        return self._write_held(snapshot, table, remove, txns, metadata, max_records_per_file)

    def write_rows(
        self,
        snapshot: DeltaSnapshot,
        rows: Sequence[Mapping[str, Any]],
        *,
        mode: WriteMode = "append",
        txns: Sequence[AppTxn] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> int:
        if snapshot.partition_columns:
            raise ValueError("write_rows is for small unpartitioned tables")
        removed = list(snapshot.files()) if mode == "overwrite" else []
        schema = snapshot.arrow_schema
        table = pa.Table.from_pylist(list(rows), schema=schema)
        return self._write_held(snapshot, table, removed, txns, metadata)

    def _write_held(
        self,
        snapshot: DeltaSnapshot,
        table: pa.Table,
        removed: Sequence[DataFile],
        txns: Sequence[AppTxn],
        metadata: CommitMetadata | None,
        max_records_per_file: int | None = None,
    ) -> int:
        """Rows already in this process written by pyarrow into the table's partition folders
        and committed with `removed` (no rows: no file)."""
        schema = snapshot.schema  # parsed from the Delta log on each access
        table = table.select(schema.fieldNames())
        groups = driver_write.groups(table, snapshot.partition_columns) if table.num_rows else []
        if groups is None:  # a partition value Spark would escape: Spark names its folder
            rows = held_read.frame(self.spark, table, schema)
            return self.write(snapshot, rows, remove=removed, txns=txns, metadata=metadata,
                              max_records_per_file=max_records_per_file)
        adds = data_files.write_arrow(self.fs, self.fs_path(snapshot.path), snapshot, groups,
                                      max_records_per_file)
        if callable(metadata):
            metadata = metadata(table.num_rows)
        return self._commit(snapshot, adds, removed, txns, metadata)

    def _commit(
        self,
        snapshot: DeltaSnapshot,
        adds: list[AddAction],
        removed: Sequence[DataFile],
        txns: Sequence[AppTxn],
        metadata: Mapping[str, Any] | None,
    ) -> int:
        commit_id = uuid.uuid4().hex
        try:
            delta_commit.commit(snapshot, adds, removed, txns, metadata, commit_id=commit_id,
                                discard=lambda paths: self._delete_files(snapshot.path, paths))
        except DeltaError as exc:  # a lost race is a `ConcurrentWriteError` already
            # delta-rs checks a commit against those since the version it read: with their
            # log forgotten meanwhile (an erasure's clean-up), it cannot.
            if not snapshot.forgotten() or delta_commit.version_of(  # or it landed after all
                    self.fs, self.fs_path(snapshot.path), commit_id,
                    range(self._load(snapshot.path).version(), -1, -1)) is not None:
                raise
            self._delete_files(snapshot.path, [a.path for a in adds])
            raise ConcurrentWriteError(
                f"the Delta log of {snapshot.path} through version {snapshot.version}, which "
                "this write read, was forgotten meanwhile (an erasure's clean-up); nothing was "
                "written") from exc
        return self._committed_version(snapshot, commit_id)

    def _committed_version(self, snapshot: DeltaSnapshot, commit_id: str) -> int:
        """The version commit `commit_id` on `snapshot` became: the first after it whose commit
        info carries the id (delta-rs retries a commit that conflicts with nothing after other
        writers' versions). Read from the log's commit files, where loading the table gave its
        latest version, another writer's if one committed right after (and took 2-4 ms)."""
        found = delta_commit.version_of(self.fs, self.fs_path(snapshot.path), commit_id,
                                        itertools.count(snapshot.version + 1))
        # None: its log trimmed already (`forget_history`)
        return self._delta(snapshot.path).version() if found is None else found

    def list_files(self, path: str) -> list[tuple[str, int]]:
        """Files below `path` (relative paths and sizes), skipping hidden and temporary ones."""
        return data_files.listed(self.fs, self.fs_path(path))

    def tables(self) -> list[str]:
        """Every Delta table under the root: the folders holding a ``_delta_log``."""
        return data_files.tables_below(self.fs, self._fs_root.rstrip("/"))

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(self.fs_path(path)) as stream:
            return stream.read()

    def replace_file(self, path: str, data: bytes) -> None:
        folder, name = path.rsplit("/", 1)
        temp = self.fs_path(f"{folder}/.{name}.{uuid.uuid4().hex}.tmp")
        with self.fs.open_output_stream(temp) as stream:
            stream.write(data)
        self.fs.move(temp, self.fs_path(path))

    def _write_files(
        self,
        snapshot: DeltaSnapshot,
        df: DataFrame,
        max_records_per_file: int | None = None,
        rows_hint: int | None = None,
        sort_by: Sequence[str] = (),
    ) -> list[AddAction]:
        return data_files.write(
            self.fs, self.fs_path(snapshot.path), self.spark_path(snapshot.path), snapshot, df,
            max_records_per_file=max_records_per_file, rows_hint=rows_hint, sort_by=sort_by)

    def _delete_files(self, path: str, relative_paths: Sequence[str]) -> None:
        data_files.delete(self.fs, self.fs_path(path), relative_paths)

    def history(self, path: str, limit: int | None = None) -> list[dict[str, Any]]:
        return self._delta(path).history(limit)

    def changes_arrow(
        self, path: str, start_version: int, end_version: int, *, max_rows: int | None = None
    ) -> pa.Table | None:
        return change_feed.held(self, path, start_version, end_version, max_rows=max_rows)

    def changes(self, path: str, start_version: int, end_version: int | None = None) -> DataFrame:
        return change_feed.spark(self, path, start_version, end_version)

    def set_properties(self, path: str, properties: Mapping[str, str]) -> int:
        wanted = dict(properties)

        def attempt() -> int:
            table = self._load(path)
            if wanted.items() <= table.metadata().configuration.items():
                return table.version()  # so already: another writer set them meanwhile
            table.alter.set_table_properties(wanted, raise_if_not_exists=False)
            return self._delta(path).version()

        return delta_commit.retried(path, attempt,
                                    "its properties were being set; nothing was written")

    def purge_removed(self, path: str, through: int) -> list[str]:
        kept = {f.path for f in self.snapshot(path).files()}
        present = forgetting.removed_files(self.fs, self.fs_path(path), kept, through)
        self._delete_files(path, present)
        return present

    def forget_history(self, path: str, before: int) -> int:
        self._load(path, before).create_checkpoint()  # it stands in for the log before it
        return forgetting.forget_log(self.fs, self.fs_path(f"{path}/_delta_log"), before)

    def vacuum(self, path: str, *, retention: timedelta) -> list[str]:
        return delta_commit.vacuum(path, lambda: self._load(path), self.fs, self.fs_path(path),
                                   retention_hours=int(retention.total_seconds() // 3600))
