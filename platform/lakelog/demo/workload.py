"""A deterministic web-shop workload: NDJSON landing files for the demo topics of `shop.py`.

Users browse in sessions — page views, searches, clicks on results, cart commands and the
orders their checkouts create — with the clocks and the imperfections a real collector sees, so
that every stream-processing feature of the demo has something to do. All times are integer
milliseconds; simulated ("true") time starts at `Workload.start`:

- 1,000 events per simulated minute: the sessions starting in minute *j* (chunk *j*) produce
  exactly 1,000 events, the last chunk the remainder, so 1,000,000 events span ~16.7 hours
  (plus up to ~1.5 hours of late arrivals).
- ``device_time`` = true time + the user's clock skew: 0 for 95% of users, up to ±10 minutes
  for the rest, constant per user.
- A device sends its unsent events in one request 0-30 s after the oldest of them (mobile
  batching); 1% of requests are held 2-60 minutes (offline device), making late arrivals.
  ``sent_time`` = true send time + skew, on the device clock.
- ``received_time`` = true send time + 20-500 ms latency, on the server clock, so the event time
  ``device_time + (received_time - sent_time)`` is the true time plus the latency.
- 1% of requests are retried 1-120 s later: the same records (event id, payload, device_time)
  delivered again with later sent and received times.
- Orders are created by the server 5-50 ms after it receives a checkout: its own clock, no skew.
- Cart commands are consistent (remove only what is in the cart, check out only a non-empty cart;
  the order holds the cart's items), except ~0.5% deliberately invalid commands, which create no
  order and are counted in `BatchSummary.invalid_commands`.
- About one line in 10,000 of a topic's batch (at least one if it has 1,000 lines) is a corrupted
  extra copy of a record: truncated JSON, a wrong type, or no ``user_id``.

Batch *k* holds the records whose received time falls in the *k*-th of `batches` equal slices of
the span (the first and last open-ended), in received order. Chunk *j* is generated from its own
``Random(f"{seed}:{j}")``, so a batch depends on nothing but the workload, and regenerates only
the chunks whose records can reach its slice (`MAX_LAG_MS`). Only the malformed lines depend on
`batches`; the valid lines are the same however the stream is sliced.
"""

from __future__ import annotations

import os
import random
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta, timezone

from lakelog.demo.sessions import (
    CART_EVENTS,
    CHUNK_MS,
    CLICKS,
    DUPLICATE,
    EVENTS_PER_CHUNK,
    INVALID,
    MAX_LAG_MS,
    MAX_SKEW_MS,
    ORDERS,
    P_SKEWED,
    PAGE_VIEWS,
    SEARCHES,
    TOPICS,
    Catalog,
    Chunk,
)
from lakelog.errors import ConfigError

MALFORMED_EVERY = 10_000
LINES_PER_FILE = 50_000

#: Per topic, a field given a value of the wrong type in malformed lines, and the field after it.
WRONG_TYPE = {
    PAGE_VIEWS: ("device_time", "sent_time", '"yesterday"'),
    SEARCHES: ("results", "device_time", '"p-00001 p-00002"'),
    CLICKS: ("position", "device_time", '"first"'),
    CART_EVENTS: ("quantity", "unit_price", '"two"'),
    ORDERS: ("total", "device_time", '"12,50"'),
}
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class TopicCounts:
    """One topic's lines in one batch: ``lines == malformed + duplicates + events``."""

    lines: int
    malformed: int
    duplicates: int  # deliveries of an event delivered before (in this or an earlier batch)
    events: int  # distinct valid events delivered for the first time


@dataclass(frozen=True)
class BatchSummary:
    """What a batch holds, so a demo can check records in = appended + duplicates + dead letters."""

    batch: int
    topics: dict[str, TopicCounts]
    invalid_commands: int  # cart commands (first deliveries) that an event-sourced cart rejects

    @property
    def lines(self) -> int:
        return sum(c.lines for c in self.topics.values())


def _iso_formatter():
    """ms since the epoch → ``2026-01-05T08:00:01.123Z``, the part up to the second cached."""
    prefixes: dict[int, str] = {}
    millis = [f"{i:03d}Z" for i in range(1000)]

    def iso(ms: int) -> str:
        second, milli = divmod(ms, 1000)
        prefix = prefixes.get(second)
        if prefix is None:
            moment = EPOCH + timedelta(seconds=second)
            prefix = prefixes[second] = moment.strftime("%Y-%m-%dT%H:%M:%S.")
        return prefix + millis[milli]

    return iso


def _corrupt(line: str, topic: int, kind: int, r: random.Random) -> str:
    """A malformed copy of `line`: truncated (0), a wrong type (1) or without user_id (2)."""
    if kind == 0:
        third = len(line) // 3
        return line[: third + int(r.random() * (len(line) - 1 - third))]
    if kind == 1:
        name, after, bad = WRONG_TYPE[topic]
        i = line.index(f'"{name}":') + len(name) + 3
        return line[:i] + bad + line[line.index(f',"{after}":', i) :]
    i = line.index(',"user_id":')
    return line[:i] + line[line.index(',"', i + 1) :]


@dataclass(frozen=True)
class Workload:
    """The demo shop's event stream: `events` distinct events delivered in `batches` batches.

    Equal workloads produce byte-identical batches, whatever was generated before and in which
    process. `users` defaults to ``max(100, events // 200)``.
    """

    events: int
    _: KW_ONLY
    seed: int = 7
    batches: int = 4
    start: datetime = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)
    users: int | None = None
    products: int = 2000
    #: Batch summaries worked out while the batch's lines were made (`summary` reuses them).
    _summaries: dict[int, BatchSummary] = field(default_factory=dict, init=False, repr=False,
                                                compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.events < 1 or self.batches < 1 or self.products < 1:
            raise ConfigError("workload: events, batches and products must be >= 1")
        if self.users is not None and self.users < 1:
            raise ConfigError("workload: users must be >= 1")
        if self.start.tzinfo is None:
            raise ConfigError("workload: start must be timezone-aware (e.g. tzinfo=timezone.utc)")

    @property
    def user_count(self) -> int:
        return self.users if self.users is not None else max(100, self.events // 200)

    @property
    def span(self) -> timedelta:
        """Simulated time in which the events happen (late arrivals are received after it)."""
        return timedelta(milliseconds=self.events * CHUNK_MS // EVENTS_PER_CHUNK)

    def batch_records(self, k: int) -> dict[str, list[str]]:
        """Batch `k`'s NDJSON lines (no newline) per topic, in received order."""
        records = self._records(k)
        self._summaries[k] = self._summarize(k, records)
        iso = _iso_formatter()
        out = {}
        for topic, name in enumerate(TOPICS):
            lines = [
                f'{{"event_id":"{e}","user_id":"{u}",{b},"device_time":"{iso(d)}",'
                f'"sent_time":"{iso(s)}","received_time":"{iso(r)}"}}'
                for r, _, _, _, e, u, b, _, d, s in records[topic]
            ]
            records[topic] = []
            r = random.Random(f"{self.seed}:malformed:{k}:{name}")
            for i in range(_malformed(len(lines))):
                bad = _corrupt(lines[int(r.random() * len(lines))], topic, (topic + k + i) % 3, r)
                lines.insert(int(r.random() * (len(lines) + 1)), bad)
            out[name] = lines
        return out

    def summary(self, k: int) -> BatchSummary:
        """Counts of batch `k`'s lines, without formatting them."""
        if k not in self._summaries:
            self._summaries[k] = self._summarize(k, self._records(k))
        return self._summaries[k]

    def _summarize(self, k: int, records: list[list[tuple]]) -> BatchSummary:
        topics, invalid = {}, 0
        for topic, name in enumerate(TOPICS):
            flags = [rec[7] for rec in records[topic]]
            duplicates = sum(f & DUPLICATE for f in flags)
            invalid += sum(f == INVALID for f in flags)
            malformed = _malformed(len(flags))
            topics[name] = TopicCounts(
                len(flags) + malformed, malformed, duplicates, len(flags) - duplicates
            )
        return BatchSummary(k, topics, invalid)

    def write_batch(
        self, k: int, root: str | os.PathLike[str], *, lines_per_file: int = LINES_PER_FILE
    ) -> list[str]:
        """Write batch `k` under ``<root>/landing/<topic>/batch-<k>/``; the paths written.

        Each file appears atomically (hidden temp file, then rename), and files that already
        exist are skipped, so a rerun after a kill completes a batch without rewriting any file.
        """
        written = []
        for topic, lines in self.batch_records(k).items():
            folder = f"landing/{topic}/batch-{k:04d}"
            for n, first in enumerate(range(0, len(lines), lines_per_file)):
                name = f"part-{n:04d}.ndjson"
                if land_file(os.path.join(root, folder, name),
                             lines[first : first + lines_per_file]):
                    written.append(f"{folder}/{name}")
        return written

    @property
    def _start_ms(self) -> int:
        return (self.start - EPOCH) // timedelta(milliseconds=1)

    def _records(self, k: int) -> list[list[tuple]]:
        """Batch `k`'s records per topic, sorted by received time.

        A record is ``(received, chunk, seq, topic, event_id, user_id, body, flags, device,
        sent)``; the first three are unique, so sorting never compares the rest.
        """
        if not 0 <= k < self.batches:
            raise ConfigError(f"workload: batch {k} is not in 0..{self.batches - 1}")
        start, span = self._start_ms, self.events * CHUNK_MS // EVENTS_PER_CHUNK
        lo = start + span * k // self.batches if k > 0 else None
        hi = start + span * (k + 1) // self.batches if k < self.batches - 1 else None
        chunks = -(-self.events // EVENTS_PER_CHUNK)
        first = 0 if lo is None else max(0, (lo - MAX_LAG_MS - start) // CHUNK_MS)
        last = chunks if hi is None else min(chunks, (hi - start) // CHUNK_MS + 1)
        catalog = Catalog(self.seed, self.products)
        r = random.Random(f"{self.seed}:users")
        skews = [
            int((2 * r.random() - 1) * MAX_SKEW_MS) if r.random() < P_SKEWED else 0
            for _ in range(self.user_count)
        ]
        out: list[list[tuple]] = [[] for _ in TOPICS]
        for j in range(first, last):
            chunk = Chunk(j, catalog, skews, seed=self.seed, events=self.events,
                          start_ms=self._start_ms)
            for rec in chunk.records():
                if (lo is None or rec[0] >= lo) and (hi is None or rec[0] < hi):
                    out[rec[3]].append(rec)
        for recs in out:
            recs.sort()
        return out


def land_file(path: str | os.PathLike[str], lines: list[str]) -> bool:
    """Write `lines` as the NDJSON landing file `path`, atomically (a hidden temp file, then a
    rename), unless it exists: whether it was written."""
    if os.path.exists(path):
        return False
    folder, name = os.path.split(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines))
        f.write("\n")
    os.replace(tmp, path)
    return True


def _malformed(valid: int) -> int:
    return max(round(valid / MALFORMED_EVERY), 1 if valid >= 1000 else 0)
