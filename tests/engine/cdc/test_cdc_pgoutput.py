"""pgoutput protocol v1 messages, and their decoding into change events of whole transactions."""

from __future__ import annotations

import struct

import pytest

from lakelog.cdc import CaptureError, SourceColumn, SourceTable
from lakelog.cdc.envelope import Origin
from lakelog.cdc.pgdecode import Decoder
from lakelog.cdc.pgoutput import UNCHANGED, format_lsn, parse, parse_lsn

TABLE = SourceTable(
    "items",
    (SourceColumn("id", "bigint"), SourceColumn("note", "text"), SourceColumn("n", "integer")),
    ("id",),
)
ORIGIN = Origin("postgresql", "shop", "db", "public")
RELID = 16400


def relation(relid=RELID, name=b"items", columns=(b"id", b"note", b"n"), namespace=b"public"):
    body = struct.pack("!I", relid) + namespace + b"\0" + name + b"\0" + b"f"
    body += struct.pack("!h", len(columns))
    for i, column in enumerate(columns):
        body += (b"\x01" if i == 0 else b"\x00") + column + b"\0" + struct.pack("!Ii", 25, -1)
    return b"R" + body


def tup(values):
    out = struct.pack("!h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED:
            out += b"u"
        else:
            data = v.encode()
            out += b"t" + struct.pack("!i", len(data)) + data
    return out


def begin(xid, final_lsn=0, ts_pg_us=0):
    return b"B" + struct.pack("!qqI", final_lsn, ts_pg_us, xid)


def commit(end_lsn, commit_lsn=0):
    return b"C" + struct.pack("!bqqq", 0, commit_lsn or end_lsn - 8, end_lsn, 0)


def insert(values, relid=RELID):
    return b"I" + struct.pack("!I", relid) + b"N" + tup(values)


def update(old, new, kind=b"O", relid=RELID):
    old_part = b"" if old is None else kind + tup(old)
    return b"U" + struct.pack("!I", relid) + old_part + b"N" + tup(new)


def delete(old, kind=b"O", relid=RELID):
    return b"D" + struct.pack("!I", relid) + kind + tup(old)


def truncate(*relids):
    return b"T" + struct.pack("!ib", len(relids), 0) + struct.pack(f"!{len(relids)}I", *relids)


def decode(rows, *, after=0, upto=None, decoder=None):
    decoder = decoder or Decoder({"items": TABLE}, "public", "test")
    return decoder.decode(rows, origin=ORIGIN, after=after, upto=upto, ts_ms=5)


def test_messages_parse():
    assert parse(begin(7, final_lsn=300, ts_pg_us=1_000)).xid == 7
    assert parse(begin(7, ts_pg_us=1_000)).commit_ts_us == 946_684_800_001_000
    assert parse(commit(400, commit_lsn=390)).end_lsn == 400
    rel = parse(relation())
    assert (rel.namespace, rel.name, rel.replica_identity) == ("public", "items", "f")
    assert rel.columns == ("id", "note", "n")
    assert parse(insert(["1", None, "3"])).new == ("1", None, "3")
    up = parse(update(["1", "a", "2"], ["1", UNCHANGED, "3"]))
    assert (up.old_kind, up.old, up.new) == ("O", ("1", "a", "2"), ("1", UNCHANGED, "3"))
    assert parse(update(None, ["1", "a", "2"])).old is None
    assert parse(delete(["1", None, None], kind=b"K")).old_kind == "K"
    assert parse(truncate(1, 2)).relids == (1, 2)
    assert parse(b"Y" + b"\0" * 8) is None


@pytest.mark.parametrize("text", ["0/0", "0/16B3748", "16/B374D848", "FFFFFFFF/FFFFFFFF"])
def test_lsn_text_round_trips(text):
    assert format_lsn(parse_lsn(text)) == text


def test_positions_are_commit_end_and_change_lsn():
    rows = [
        (100, begin(7)), (100, relation()), (100, insert(["1", "a", "2"])),
        (110, update(["1", "a", "2"], ["1", "b", "2"])), (150, commit(160)),
    ]
    batch = decode(rows)
    assert batch.end == 160
    positions = [(e["op"], e["source"]["lsn"], e["source"]["commit_lsn"]) for e in batch.events]
    assert positions == [("c", 100, 160), ("u", 110, 160)]
    assert {e["source"]["txId"] for e in batch.events} == {7}
    assert batch.events[1]["before"] == {"id": 1, "note": "a", "n": 2}
    assert batch.events[1]["after"] == {"id": 1, "note": "b", "n": 2}


def test_only_transactions_committed_in_the_range_are_decoded():
    rows = [
        (100, begin(1)), (100, relation()), (100, insert(["1", "a", "1"])), (108, commit(110)),
        (110, begin(2)), (112, insert(["2", "b", "2"])), (118, commit(120)),
        (120, begin(3)), (122, insert(["3", "c", "3"])), (128, commit(130)),
        (130, begin(4)), (132, insert(["4", "d", "4"])),  # not committed yet: not returned
    ]
    batch = decode(rows, after=110, upto=120)
    assert [e["after"]["id"] for e in batch.events] == [2] and batch.end == 120
    batch = decode(rows, after=110)
    assert [e["after"]["id"] for e in batch.events] == [2, 3] and batch.end == 130
    assert decode(rows, after=130).events == [] and decode(rows, after=130).end == 130


def test_unchanged_toast_value_comes_from_the_old_row():
    toasted = update(["1", "long", "1"], ["1", UNCHANGED, "2"])
    rows = [(1, begin(1)), (1, relation()), (2, toasted), (3, commit(9))]
    assert decode(rows).events[0]["after"] == {"id": 1, "note": "long", "n": 2}
    rows[2] = (2, update(["1", None, None], ["1", UNCHANGED, "2"], kind=b"K"))
    with pytest.raises(CaptureError, match="TOASTed"):
        decode(rows)


def test_key_only_old_rows():
    same_key = update(["1", None, None], ["1", "x", "2"], kind=b"K")
    new_key = update(["1", None, None], ["5", "x", "2"], kind=b"K")
    rows = [(1, begin(1)), (1, relation()), (2, same_key), (3, new_key), (4, commit(9))]
    events = decode(rows).events
    assert [(e["op"], e["before"], e["after"] and e["after"]["id"]) for e in events] == [
        ("u", None, 1),
        ("d", {"id": 1, "note": None, "n": None}, None),
        ("c", None, 5),
    ]


def test_truncate_is_refused_with_a_clear_error():
    rows = [(1, begin(1)), (1, relation()), (2, truncate(RELID)), (3, commit(9))]
    with pytest.raises(CaptureError, match="TRUNCATE of items"):
        decode(rows)
    assert decode(rows, after=9).events == []  # before the position: landed by a new snapshot


def test_other_tables_are_skipped_and_missing_columns_refused():
    other = relation(relid=1, name=b"other")
    rows = [(1, begin(1)), (1, other), (2, insert(["1", "a", "1"], relid=1)), (3, commit(9))]
    assert decode(rows).events == [] and decode(rows).end == 9
    narrow = relation(columns=(b"id", b"note"))
    rows = [(1, begin(1)), (1, narrow), (2, insert(["1", "a"])), (3, commit(9))]
    with pytest.raises(CaptureError, match=r"lost column\(s\) \['n'\]"):
        decode(rows)


def test_relations_are_remembered_between_batches():
    decoder = Decoder({"items": TABLE}, "public", "test")
    first = [(1, begin(1)), (1, relation()), (2, insert(["1", "a", "1"])), (3, commit(9))]
    decode(first, decoder=decoder)
    second = [(10, begin(2)), (11, delete(["1", "a", "1"])), (12, commit(19))]  # no Relation
    batch = decode(second, after=9, decoder=decoder)
    assert [(e["op"], e["before"]["id"]) for e in batch.events] == [("d", 1)]
