"""The changelog join (`lakelog.joins.ChangelogJoin`): accounts with their owners, joined on a
column that is not the owners' table's own key of the accounts, kept from both change streams."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from engine_helpers import CrashAfterCommit
from pyspark.sql import types as T

from lakelog import consumers
from lakelog.cdc.changelog import changelog_topic
from lakelog.cdc.compacted import CompactedTable
from lakelog.errors import ConfigError, DefinitionChangedError
from lakelog.joins import ChangelogJoin, changelog_join
from lakelog.lake import one_partition
from lakelog.log import ingest
from lakelog.spark.session import over_connect

ACCOUNT = T.StructType([
    T.StructField("account_id", T.LongType()),
    T.StructField("owner_id", T.LongType()),
    T.StructField("balance", T.LongType()),
])
OWNER = T.StructType([
    T.StructField("owner_id", T.LongType()),
    T.StructField("name", T.StringType()),
    T.StructField("region", T.StringType()),
])
ACCOUNTS = CompactedTable("accounts", changelog_topic("accounts", ACCOUNT, ("account_id",)),
                          ACCOUNT, ("account_id",))
OWNERS = CompactedTable("owners", changelog_topic("owners", OWNER, ("owner_id",)), OWNER,
                        ("owner_id",))
TOPICS = {t.topic.name: t.topic for t in (ACCOUNTS, OWNERS)}
JOIN = ChangelogJoin(
    "account_owners",
    left=ACCOUNTS,
    right=OWNERS,
    on=(("owner_id", "owner_id"),),
    left_columns=(("account_id", "account_id"), ("balance", "balance"), ("owner_id", "owner_id")),
    right_columns=(("owner", "name"), ("region", "region")),
)


def change(table: CompactedTable, op: str, row: dict, seq: int) -> str:
    """A Debezium change event of `table` at source sequence `seq`; a delete carries the key."""
    key = {k: row[k] for k in table.key}
    return json.dumps({
        "before": key if op in ("u", "d") else None, "after": None if op == "d" else row,
        "op": op, "ts_ms": 1_772_000_000_000 + seq,
        "source": {"connector": "sqlite", "name": "bank", "table": table.name, "seq": seq},
    })


def deliver(lake, spark, now, join, changes, *, crash_after=None):
    """Land `changes` ((table, line) pairs) and run the join until caught up; with
    `crash_after` (a table path), the first run dies right after committing that table and a
    second one finishes the batch."""
    for table in (ACCOUNTS, OWNERS):
        lines = [line for t, line in changes if t is table]
        if lines:
            ingest.produce(lake, spark, table.topic, lines, source="test", now=now)
    if crash_after:
        crashing = CrashAfterCommit(spark, lake.root, crash_after)
        crashing.armed = True
        with pytest.raises(RuntimeError, match="crash after committing"):
            consumers.run_until_caught_up(crashing, join.consumer, TOPICS, now=lambda: now)
    consumers.run_until_caught_up(lake, join.consumer, TOPICS, now=lambda: now)


def output(lake, join):
    rows = lake.read(lake.snapshot(join.output.path)).collect()
    return sorted(((r["account_id"], r["balance"], r["owner_id"], r["owner"], r["region"])
                   for r in rows), key=str)


def batch_join(accounts: dict, owners: dict, how: str) -> list[tuple]:
    """The join of the current rows, computed here in Python (a null owner_id matches nothing)."""
    rows, matched = [], set()
    for a in accounts.values():
        partners = [o for o in owners.values()
                    if a["owner_id"] is not None and o["owner_id"] == a["owner_id"]]
        matched |= {o["owner_id"] for o in partners}
        rows += [(a["account_id"], a["balance"], a["owner_id"], o["name"], o["region"])
                 for o in partners]
        if not partners and how in ("left", "full"):
            rows.append((a["account_id"], a["balance"], a["owner_id"], None, None))
    if how in ("right", "full"):
        rows += [(None, None, None, o["name"], o["region"]) for o in owners.values()
                 if o["owner_id"] not in matched]
    return sorted(rows, key=str)


def test_updates_that_move_rows_deletes_and_stale_changes(lake, spark, now):
    join = replace(JOIN, how="left")
    deliver(lake, spark, now, join, [
        (ACCOUNTS, change(ACCOUNTS, "c", {"account_id": 1, "owner_id": 10, "balance": 5}, 1)),
        (ACCOUNTS, change(ACCOUNTS, "c", {"account_id": 2, "owner_id": 10, "balance": 7}, 2)),
        (ACCOUNTS, change(ACCOUNTS, "c", {"account_id": 3, "owner_id": None, "balance": 1}, 3)),
        (OWNERS, change(OWNERS, "c", {"owner_id": 10, "name": "Ann", "region": "EU"}, 1)),
    ])
    assert output(lake, join) == [(1, 5, 10, "Ann", "EU"), (2, 7, 10, "Ann", "EU"),
                                  (3, 1, None, None, None)]
    # Account 2 moves to owner 20, who arrives in the same batch; Ann is renamed; account 3
    # gets an owner that does not exist yet. The run dies between the output's commit and the
    # state's; the retry computes the same rows from the state before the batch.
    deliver(lake, spark, now, join, crash_after=join.output.path, changes=[
        (ACCOUNTS, change(ACCOUNTS, "u", {"account_id": 2, "owner_id": 20, "balance": 8}, 4)),
        (ACCOUNTS, change(ACCOUNTS, "u", {"account_id": 3, "owner_id": 30, "balance": 1}, 5)),
        (OWNERS, change(OWNERS, "u", {"owner_id": 10, "name": "Anna", "region": "EU"}, 2)),
        (OWNERS, change(OWNERS, "c", {"owner_id": 20, "name": "Bo", "region": "US"}, 3)),
    ])
    assert output(lake, join) == [(1, 5, 10, "Anna", "EU"), (2, 8, 20, "Bo", "US"),
                                  (3, 1, 30, None, None)]
    # Anna is deleted; an older change of account 1 arrives late and is ignored, and so is a
    # redelivered one.
    deliver(lake, spark, now, join, [
        (OWNERS, change(OWNERS, "d", {"owner_id": 10}, 4)),
        (ACCOUNTS, change(ACCOUNTS, "u", {"account_id": 1, "owner_id": 20, "balance": 0}, 0)),
        (ACCOUNTS, change(ACCOUNTS, "u", {"account_id": 3, "owner_id": 30, "balance": 1}, 5)),
    ])
    assert output(lake, join) == [(1, 5, 10, None, None), (2, 8, 20, "Bo", "US"),
                                  (3, 1, 30, None, None)]
    rows = lake.read(lake.snapshot(join.output.path)).collect()
    assert len({r["_row"] for r in rows}) == 3
    # Declared inner over the left join's rows, a batch is refused before it plans: accounts 1
    # and 3, unmatched, would stay until a change touched their owners.
    with pytest.raises(DefinitionChangedError, match=r"how 'left' -> 'inner'.*--rebuild"):
        deliver(lake, spark, now, replace(join, how="inner"), [
            (ACCOUNTS, change(ACCOUNTS, "u", {"account_id": 2, "owner_id": 20, "balance": 9}, 6)),
        ])
    assert output(lake, join) == [(1, 5, 10, None, None), (2, 8, 20, "Bo", "US"),
                                  (3, 1, 30, None, None)]


@pytest.mark.parametrize("how,seed,broadcast", [
    ("inner", 1, True), ("left", 2, True), ("right", 3, True), ("full", 4, True),
    ("left", 2, False), ("full", 4, False),
])
def test_incremental_equals_a_batch_join_of_the_current_rows(
    lake, spark, now, how, seed, broadcast, monkeypatch,
):
    """Random creates, updates that move accounts between owners (or to none), deletes and
    re-creates, delivered shuffled, partly twice, in random batches: after every batch the
    output is the join of each key's newest row among the changes delivered so far. The
    stored rows a batch touches are found with its winners broadcast (`broadcast`: these small
    batches always are, and worked on in one partition) or, as for a large batch, by a join
    that shuffles them, the rows spread over partitions."""
    found_by = []
    touched = changelog_join._touched

    def spied(stored, winners, records):
        found_by.append(records is not None and records <= changelog_join.BROADCAST_WINNERS)
        return touched(stored, winners, records)

    monkeypatch.setattr(changelog_join, "_touched", spied)
    if not broadcast:
        monkeypatch.setattr(changelog_join, "BROADCAST_WINNERS", -1)
        monkeypatch.setattr(one_partition, "FEW_RECORDS", -1)
    rng = random.Random(seed)
    changes, seq = [], {ACCOUNTS.name: 0, OWNERS.name: 0}
    for _ in range(24):
        table = rng.choice([ACCOUNTS, OWNERS])
        seq[table.name] += 1
        if table is ACCOUNTS:
            row = {"account_id": rng.randint(1, 5), "owner_id": rng.choice([1, 2, 3, None]),
                   "balance": rng.randint(0, 99)}
        else:
            row = {"owner_id": rng.randint(1, 3), "name": rng.choice(["a", "b", "c"]),
                   "region": rng.choice(["EU", "US"])}
        op = rng.choice(["c", "u", "u", "d"])
        changes.append((table, op, row, seq[table.name]))
    arrivals = changes + rng.sample(changes, 4)
    rng.shuffle(arrivals)
    cuts = sorted(rng.sample(range(1, len(arrivals)), 2))
    join = replace(JOIN, how=how)
    delivered: dict[tuple[str, int], tuple] = {}
    for part in (arrivals[:cuts[0]], arrivals[cuts[0]:cuts[1]], arrivals[cuts[1]:]):
        deliver(lake, spark, now, join,
                [(t, change(t, op, row, s)) for t, op, row, s in part])
        for t, op, row, s in part:
            key = (t.name, row[t.key[0]])
            if key not in delivered or delivered[key][2] < s:
                delivered[key] = (op, row, s)
        live = {n: {k: row for (name, k), (op, row, _) in delivered.items()
                    if name == n and op != "d"} for n in (ACCOUNTS.name, OWNERS.name)}
        assert output(lake, join) == batch_join(live[ACCOUNTS.name], live[OWNERS.name], how)
    assert found_by and set(found_by) == {broadcast}


def test_declaration_errors():
    with pytest.raises(ConfigError, match="how must be one of inner, left, right, full"):
        replace(JOIN, how="cross")
    with pytest.raises(ConfigError, match="owners has no column 'nope'"):
        replace(JOIN, on=(("owner_id", "nope"),))
    with pytest.raises(ConfigError, match="different types"):
        replace(JOIN, on=(("owner_id", "name"),))
    with pytest.raises(ConfigError, match="two different tables"):
        replace(JOIN, right=ACCOUNTS)
    with pytest.raises(ConfigError, match="chosen twice"):
        replace(JOIN, right_columns=(("balance", "name"),))
    with pytest.raises(ConfigError, match="at least one"):
        replace(JOIN, on=())


def test_a_batch_lets_go_of_the_rows_it_computed_once(lake, spark, now):
    """The rows a batch computes once for its outputs (local checkpoints) are freed when its
    writes are done, not left to Spark's cleaner, which lets them spill to disk meanwhile."""
    if over_connect(spark.range(1)):
        pytest.skip("a Spark Connect session does not list the server's cached rows")
    persisted = spark.sparkContext._jsc.getPersistentRDDs
    before = persisted().size()
    deliver(lake, spark, now, JOIN, [
        (ACCOUNTS, change(ACCOUNTS, "c", {"account_id": 1, "owner_id": 10, "balance": 5}, 1)),
        (OWNERS, change(OWNERS, "c", {"owner_id": 10, "name": "Ann", "region": "EU"}, 1)),
    ])
    assert output(lake, JOIN) == [(1, 5, 10, "Ann", "EU")]
    assert persisted().size() == before
