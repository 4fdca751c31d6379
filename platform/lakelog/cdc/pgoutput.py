"""A parser of pgoutput's logical replication protocol, version 1.

`pg_logical_slot_peek_binary_changes(..., 'proto_version', '1', 'publication_names', ...)` returns
one message per row. Column values arrive in text format (each type's output function), as
`str`, None (SQL NULL) or `UNCHANGED` (a TOASTed value the update did not touch, which the new
row does not repeat). Messages this capture has no use for (Origin, Type, logical decoding
Message) parse to None.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Union

from lakelog.cdc.errors import CaptureError

#: Microseconds from the Unix epoch to PostgreSQL's epoch (2000-01-01).
PG_EPOCH_US = 946_684_800_000_000


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = _Unchanged()
Value = Union[str, None, _Unchanged]

_I16, _I32, _U32 = struct.Struct("!h"), struct.Struct("!i"), struct.Struct("!I")
_BEGIN = struct.Struct("!qqI")
_COMMIT = struct.Struct("!bqqq")


@dataclass(frozen=True)
class Begin:
    final_lsn: int  # where the commit record starts
    commit_ts_us: int  # since the Unix epoch
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int  # just past the commit record
    commit_ts_us: int


@dataclass(frozen=True)
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str  # pg_class.relreplident: d, n, f or i
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Insert:
    relid: int
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Update:
    relid: int
    old: tuple[Value, ...] | None
    old_kind: str | None  # "O": the whole old row (REPLICA IDENTITY FULL), "K": its key only
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Delete:
    relid: int
    old: tuple[Value, ...]
    old_kind: str


@dataclass(frozen=True)
class Truncate:
    relids: tuple[int, ...]


Message = Union[Begin, Commit, Relation, Insert, Update, Delete, Truncate]


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` → int."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _string(data: bytes, at: int) -> tuple[str, int]:
    end = data.index(b"\0", at)
    return data[at:end].decode("utf-8"), end + 1


def _tuple(data: bytes, at: int) -> tuple[tuple[Value, ...], int]:
    (count,) = _I16.unpack_from(data, at)
    at += 2
    values: list[Value] = []
    for _ in range(count):
        kind = data[at]
        at += 1
        if kind == 0x74:  # 't': text
            (size,) = _I32.unpack_from(data, at)
            at += 4
            values.append(data[at : at + size].decode("utf-8"))
            at += size
        elif kind == 0x6E:  # 'n': null
            values.append(None)
        elif kind == 0x75:  # 'u': unchanged TOASTed value
            values.append(UNCHANGED)
        else:
            raise CaptureError(f"pgoutput: unknown tuple value kind {chr(kind)!r} (binary mode?)")
    return tuple(values), at


def parse(data: bytes) -> Message | None:
    """One pgoutput message; None for kinds that carry no row changes."""
    kind = data[0]
    if kind == 0x49:  # 'I'
        (relid,) = _U32.unpack_from(data, 1)
        if data[5] != 0x4E:
            raise CaptureError(f"pgoutput: insert without new tuple (got {chr(data[5])!r})")
        return Insert(relid, _tuple(data, 6)[0])
    if kind == 0x55:  # 'U'
        (relid,) = _U32.unpack_from(data, 1)
        at, old, old_kind = 5, None, None
        if data[at] in (0x4B, 0x4F):  # 'K' or 'O'
            old_kind = chr(data[at])
            old, at = _tuple(data, at + 1)
        if data[at] != 0x4E:
            raise CaptureError(f"pgoutput: update without new tuple (got {chr(data[at])!r})")
        return Update(relid, old, old_kind, _tuple(data, at + 1)[0])
    if kind == 0x44:  # 'D'
        (relid,) = _U32.unpack_from(data, 1)
        old, _ = _tuple(data, 6)
        return Delete(relid, old, chr(data[5]))
    if kind == 0x42:  # 'B'
        final_lsn, ts, xid = _BEGIN.unpack_from(data, 1)
        return Begin(final_lsn, ts + PG_EPOCH_US, xid)
    if kind == 0x43:  # 'C'
        _, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(data, 1)
        return Commit(commit_lsn, end_lsn, ts + PG_EPOCH_US)
    if kind == 0x52:  # 'R'
        (relid,) = _U32.unpack_from(data, 1)
        namespace, at = _string(data, 5)
        name, at = _string(data, at)
        identity = chr(data[at])
        (count,) = _I16.unpack_from(data, at + 1)
        at += 3
        columns = []
        for _ in range(count):
            column, at = _string(data, at + 1)  # skip the flags byte
            columns.append(column)
            at += 8  # type oid, type modifier
        return Relation(relid, namespace or "pg_catalog", name, identity, tuple(columns))
    if kind == 0x54:  # 'T'
        (count,) = _I32.unpack_from(data, 1)
        relids = struct.unpack_from(f"!{count}I", data, 6)
        return Truncate(tuple(relids))
    if kind in (0x4F, 0x59, 0x4D):  # Origin, Type, logical decoding Message
        return None
    raise CaptureError(f"pgoutput: unknown message kind {chr(kind)!r}")
