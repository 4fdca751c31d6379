"""Change data capture: a source database's tables as Debezium-style changelog landing files.

`SqliteSource` (triggers and a change table) and `PostgresSource` (logical decoding, pgoutput)
give a consistent snapshot and then the changes after it; `capture` lands both exactly once under
``landing/cdc.<table>/``, whatever crashes in between.

What is derived from the changes lives here too: `changelog` (the topics ``cdc.<table>`` and
their Debezium envelope; `debezium` decodes its encodings), `compacted` (the newest row per key,
with tombstones) and `history` (SCD type 2) tables, `captured` (a source declared with all of
those), `reconcile` (a compacted table against its source) and `change_streams` (a keyed table's
own changes published as a changelog topic).
"""

from lakelog.cdc.capture import CaptureResult, capture
from lakelog.cdc.envelope import dumps, event, position
from lakelog.cdc.errors import CaptureBusyError, CaptureError, SourceUnavailableError
from lakelog.cdc.postgres import PostgresSource
from lakelog.cdc.source import ChangeBatch, Snapshot, Source
from lakelog.cdc.source_tables import SourceColumn, SourceTable
from lakelog.cdc.sqlite import SqliteSource

__all__ = [
    "CaptureBusyError",
    "CaptureError",
    "CaptureResult",
    "ChangeBatch",
    "PostgresSource",
    "Snapshot",
    "Source",
    "SourceColumn",
    "SourceTable",
    "SourceUnavailableError",
    "SqliteSource",
    "capture",
    "dumps",
    "event",
    "position",
]
