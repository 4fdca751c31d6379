"""Who is in a consumer group, in which generation, and which log partitions each member owns.

The members table ``_checkpoints/_groups/<consumer>/members`` holds one row per live member with
its last heartbeat, rewritten whole by each change under a guard transaction (of two writers
from one version, one fails and tries again). A member joins, heartbeats and leaves through
`heartbeat`; a member whose heartbeat is older than the session timeout is dead and is removed
by the next member that heartbeats (Kafka's session timeout). Every change of the member set
starts a new generation, numbered by the version of the commit that made it, so generations only
increase, also across a group that emptied. Partitions are assigned round-robin over the members
in name order: every member computes the same assignment from the same table version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from pyspark.sql import types as T

from lakelog.consumers.units import GROUPS
from lakelog.errors import ConcurrentWriteError
from lakelog.lake import Lake, Snapshot
from lakelog.lake.guarded_rewrite import guarded_rewrite

SCHEMA = T.StructType(
    [
        T.StructField("member", T.StringType()),
        T.StructField("generation", T.LongType()),
        T.StructField("joined_at", T.TimestampType()),
        T.StructField("heartbeat", T.TimestampType()),
    ]
)
#: How long a member may go without a heartbeat before the group counts it dead (Kafka's
#: ``session.timeout.ms`` is 45 s): a member heartbeats between its batches, so a batch must
#: take less than this.
SESSION_TIMEOUT = timedelta(seconds=60)
_TRIES = 20


@dataclass(frozen=True)
class Membership:
    consumer: str
    snapshot: Snapshot | None
    #: The version of the commit that formed the current member set; 0 before any member.
    generation: int
    #: Each member's last heartbeat.
    members: Mapping[str, datetime] = field(default_factory=dict)
    joined: Mapping[str, datetime] = field(default_factory=dict)

    def live(self, now: datetime, timeout: timedelta = SESSION_TIMEOUT) -> list[str]:
        return sorted(m for m, seen in self.members.items() if now - seen <= timeout)

    def assignment(self, partitions: int) -> dict[str, tuple[int, ...]]:
        """Round-robin: partition k to the (k mod n)-th member in name order."""
        names = sorted(self.members)
        return {m: tuple(range(i, partitions, len(names))) for i, m in enumerate(names)}


def members_path(consumer: str) -> str:
    return f"_checkpoints/{GROUPS}/{consumer}/members"


def load(lake: Lake, consumer: str) -> Membership:
    path = members_path(consumer)
    if not lake.exists(path):
        return Membership(consumer, None, 0)
    snapshot = lake.snapshot(path)
    rows = lake.read_arrow(snapshot).to_pylist()
    return Membership(
        consumer,
        snapshot,
        rows[0]["generation"] if rows else snapshot.version,
        {r["member"]: _aware(r["heartbeat"]) for r in rows},
        {r["member"]: _aware(r["joined_at"]) for r in rows},
    )


def heartbeat(
    lake: Lake,
    consumer: str,
    member: str,
    *,
    now: datetime,
    timeout: timedelta = SESSION_TIMEOUT,
    leave: bool = False,
) -> Membership:
    """Join (or stay in) the group as `member` at `now`, or `leave` it; dead members are removed
    on the way. Writes only when the member set changes or the member's last heartbeat is older
    than a third of the timeout."""
    for _ in range(_TRIES):
        found = load(lake, consumer)
        alive = {m: seen for m, seen in found.members.items() if now - seen <= timeout}
        if leave:
            alive.pop(member, None)
        else:
            fresh = member in alive and now - alive[member] < timeout / 3
            if fresh and len(alive) == len(found.members):
                return found
            alive[member] = now
        changed = set(alive) != set(found.members)
        if leave and not changed:  # not a member (any more), and nobody died
            return found
        version = found.snapshot.version + 1 if found.snapshot is not None else 1
        generation = version if changed else found.generation
        joined = {m: found.joined.get(m, now) for m in alive}
        rows = [{"member": m, "generation": generation, "joined_at": joined[m], "heartbeat": seen}
                for m, seen in sorted(alive.items())]
        try:
            written = guarded_rewrite(
                lake, members_path(consumer), SCHEMA, found.snapshot, rows,
                guard=f"lakelog.group:{consumer}/members",
                metadata={"lakelog.group": {"member": member, "generation": generation,
                                            "leave": leave}},
            )
        except ConcurrentWriteError:
            continue  # another member changed the table first: read it again
        return Membership(consumer, lake.snapshot(members_path(consumer), written),
                          generation, alive, joined)
    raise ConcurrentWriteError(
        f"consumer group {consumer}: member {member} lost {_TRIES} races for the members table"
    )


def _aware(value: datetime) -> datetime:
    """Delta timestamps come back naive: lakelog's are UTC."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value
