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

from lakelog.errors import ConfigError

TOPICS = ("page_views", "searches", "clicks", "cart_events", "orders")
PAGE_VIEWS, SEARCHES, CLICKS, CART_EVENTS, ORDERS = range(len(TOPICS))

EVENTS_PER_CHUNK = 1_000
CHUNK_MS = 60_000
MAX_SESSION_MS = 30 * 60_000
MAX_FLUSH_MS = 30_000
OFFLINE_MS = (2 * 60_000, 60 * 60_000)
RETRY_MS = (1_000, 120_000)
LATENCY_MS = (20, 500)
#: How long after its chunk starts a record can be received; 5 s covers latency and order creation.
MAX_LAG_MS = CHUNK_MS + MAX_SESSION_MS + MAX_FLUSH_MS + OFFLINE_MS[1] + RETRY_MS[1] + 5_000
P_SKEWED, MAX_SKEW_MS = 0.05, 10 * 60_000
P_OFFLINE = P_RETRY = 0.01
P_INVALID = 0.005
MALFORMED_EVERY = 10_000
LINES_PER_FILE = 50_000

DUPLICATE, INVALID = 1, 2

# Query words and ids are ASCII letters, digits, '-' and ' ', so lines need no JSON escaping.
ADJECTIVES = tuple(
    "red blue black white green wooden steel leather wireless organic vintage compact large small"
    " waterproof classic modern cotton smart portable".split()
)
NOUNS = tuple(
    "shoes jacket lamp chair desk headphones backpack watch kettle mug blender sofa rug tent"
    " bicycle helmet camera speaker keyboard mouse monitor pillow blanket towel vase candle"
    " teapot scarf gloves boots sunglasses wallet umbrella bottle pan knife grill drill hammer"
    " ladder".split()
)
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


def _price(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


class _Catalog:
    """Products (ids, prices in cents, popularity = index order) and the search engine's answers."""

    def __init__(self, seed: int, products: int) -> None:
        r = random.Random(f"{seed}:catalog")
        self.ids = [f"p-{i:05d}" for i in range(products)]
        self.cents = [
            max(1, round(2.718281828 ** r.gauss(3.2, 0.9))) * 100 - r.choice((1, 1, 5, 51))
            for _ in range(products)
        ]
        self.prices = [_price(c) for c in self.cents]
        kinds = [(r.randrange(len(ADJECTIVES)), r.randrange(len(NOUNS))) for _ in range(products)]
        by_noun: list[list[int]] = [[] for _ in NOUNS]
        for i, (_, noun) in enumerate(kinds):
            by_noun[noun].append(i)
        #: (query, result product indices, results as JSON) per (adjective or -1, noun).
        self.queries: dict[tuple[int, int], tuple[str, list[int], str]] = {}
        for noun, members in enumerate(by_noun):
            for adj in range(-1, len(ADJECTIVES)):
                hits = sorted(members, key=lambda i: (kinds[i][0] != adj, i))[:10]
                query = NOUNS[noun] if adj < 0 else f"{ADJECTIVES[adj]} {NOUNS[noun]}"
                self.queries[adj, noun] = (query, hits, self._json(hits))

    def _json(self, hits: list[int]) -> str:
        return "[" + ",".join(f'"{self.ids[i]}"' for i in hits) + "]"


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
        catalog = _Catalog(self.seed, self.products)
        r = random.Random(f"{self.seed}:users")
        skews = [
            int((2 * r.random() - 1) * MAX_SKEW_MS) if r.random() < P_SKEWED else 0
            for _ in range(self.user_count)
        ]
        out: list[list[tuple]] = [[] for _ in TOPICS]
        for j in range(first, last):
            for rec in _Chunk(self, j, catalog, skews).records():
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


class _Chunk:
    """The sessions starting in simulated minute `j`, and the records their devices send."""

    def __init__(self, w: Workload, j: int, catalog: _Catalog, skews: list[int]) -> None:
        self.r = random.Random(f"{w.seed}:{j}")
        self.j, self.cat, self.skews, self.users = j, catalog, skews, w.user_count
        self.t0 = w._start_ms + j * CHUNK_MS
        self.quota = min(EVENTS_PER_CHUNK, w.events - j * EVENTS_PER_CHUNK)
        self.made = 0
        self.out: list[tuple] = []

    def records(self) -> list[tuple]:
        """``(received, chunk, seq, topic, event_id, user_id, body, flags, device, sent)``."""
        s = 0
        while self.made < self.quota:
            user = int(self.r.random() * self.users)
            self._send(user, self._session(s))
            s += 1
        return self.out

    def _event(self, events: list, t: int, topic: int, body: str, flags: int = 0) -> None:
        events.append((t, topic, f"e-{self.j:05d}-{self.made:04d}", body, flags, None))
        self.made += 1

    def _command(self, action: str, product: int | None, quantity: int = 0) -> str:
        if product is None:
            return f'"action":"{action}","product_id":null,"quantity":null,"unit_price":null'
        return (
            f'"action":"{action}","product_id":"{self.cat.ids[product]}",'
            f'"quantity":{quantity},"unit_price":{self.cat.prices[product]}'
        )

    def _session(self, s: int) -> list[tuple]:
        """One session's events ``(true time, topic, event_id, body, flags, order)``, in order.

        `order` is ``(event_id, body)`` of the order a checkout creates, else None. Each step
        draws `x`; its ranges choose click, search, product page, cart command or other page.
        """
        rnd, cat, j, ev = self.r.random, self.cat, self.j, self._event
        head = f'"session_id":"s-{j:05d}-{s:03d}"'
        events: list[tuple] = []
        t = self.t0 + int(rnd() * CHUNK_MS)
        end = t + MAX_SESSION_MS
        cart: dict[int, int] = {}  # product -> quantity, in order of first add
        carts = searches = 0
        product: int | None = None  # the product on screen
        results: tuple[str, list[int]] | None = None  # the last search with results
        y = rnd()
        x = 0.44 if y < 0.4 else 0.5 if y < 0.6 else 0.99  # search, product page or home
        while self.made < self.quota and t <= end:
            if x < 0.45 and self.quota - self.made < 2:
                x = 0.99  # no room for a two-event step
            cid = f'"cart_id":"c-{j:05d}-{s:03d}-{carts}"'
            cart_step = 0.62 <= x < 0.90 and (product is not None and x < 0.78 or bool(cart))
            if cart_step and rnd() < P_INVALID:
                if cart or rnd() < 0.5:
                    p = int(rnd() * len(cat.ids))
                    while p in cart:
                        p = (p + 1) % len(cat.ids)
                    command = self._command("remove", p, 1)
                else:
                    command = self._command("checkout", None)
                ev(events, t, CART_EVENTS, f"{head},{cid},{command}", INVALID)
            elif results and x < 0.30:
                qid, hits = results
                pos = 1 + int(len(hits) * rnd() ** 2.5)
                product = hits[pos - 1]
                pid = cat.ids[product]
                click = f'"query_id":"{qid}","product_id":"{pid}","position":{pos}'
                ev(events, t, CLICKS, f"{head},{click}")
                t += 150 + int(rnd() * 750)
                ev(events, t, PAGE_VIEWS, f'{head},"page":"product","product_id":"{pid}"')
                if rnd() < 0.6:
                    results = None
            elif x < 0.45:
                noun = int(len(NOUNS) * rnd() ** 1.5)
                adj = int(rnd() * len(ADJECTIVES)) if rnd() < 0.6 else -1
                query, hits, hits_json = cat.queries[adj, noun]
                if rnd() < 0.03:  # a typo finds nothing
                    query, hits, hits_json = query[:-2] + query[-1], [], "[]"
                qid = f"q-{j:05d}-{s:03d}-{searches}"
                searches += 1
                ev(events, t, PAGE_VIEWS, f'{head},"page":"search","product_id":null')
                t += 100 + int(rnd() * 300)
                search = f'"query_id":"{qid}","query":"{query}","results":{hits_json}'
                ev(events, t, SEARCHES, f"{head},{search}")
                results, product = ((qid, hits) if hits else None), None
            elif x < 0.62:
                product = int(len(cat.ids) * rnd() ** 2)
                pid = cat.ids[product]
                ev(events, t, PAGE_VIEWS, f'{head},"page":"product","product_id":"{pid}"')
            elif product is not None and x < 0.78:
                y = rnd()
                qty = 1 if y < 0.75 else 2 if y < 0.93 else 3
                cart[product] = cart.get(product, 0) + qty
                ev(events, t, CART_EVENTS, f'{head},{cid},{self._command("add", product, qty)}')
            elif cart and x < 0.83:
                items = list(cart)
                p = items[int(rnd() * len(items))]
                qty = cart[p] if rnd() < 0.7 else 1 + int(rnd() * cart[p])
                cart[p] -= qty
                if not cart[p]:
                    del cart[p]
                ev(events, t, CART_EVENTS, f'{head},{cid},{self._command("remove", p, qty)}')
            elif cart and x < 0.90:
                if self.quota - self.made < 2:
                    break
                ev(events, t, CART_EVENTS, f'{head},{cid},{self._command("checkout", None)}')
                items = ",".join(
                    f'{{"product_id":"{cat.ids[p]}","quantity":{q},"unit_price":{cat.prices[p]}}}'
                    for p, q in cart.items()
                )
                total = _price(sum(q * cat.cents[p] for p, q in cart.items()))
                oid = f'"order_id":"o-{j:05d}-{s:03d}-{carts}"'
                order = f'{head},{oid},{cid},"items":[{items}],"total":{total}'
                events[-1] = events[-1][:5] + ((f"e-{j:05d}-{self.made:04d}", order),)
                self.made += 1
                cart, product, carts = {}, None, carts + 1
                if rnd() < 0.6:
                    break
            else:
                page = "cart" if x < 0.95 else "home"
                ev(events, t, PAGE_VIEWS, f'{head},"page":"{page}","product_id":null')
            if rnd() < 0.05:
                break
            t += 1_000 + min(int(rnd() * rnd() * 40_000), 59_000)
            x = rnd()
        return events

    def _send(self, user: int, events: list[tuple]) -> None:
        """Deliver a session's events in requests, late, retried — and the orders they create."""
        rnd, out, j = self.r.random, self.out, self.j
        skew, uid = self.skews[user], f"u-{user:06d}"
        i, n = 0, len(events)
        while i < n:
            send = events[i][0] + int(rnd() * (MAX_FLUSH_MS + 1))
            stop = i + 1
            while stop < n and events[stop][0] <= send:
                stop += 1
            if rnd() < P_OFFLINE:
                send += OFFLINE_MS[0] + int(rnd() * (OFFLINE_MS[1] - OFFLINE_MS[0]))
            attempts = [(send, 0)]
            if rnd() < P_RETRY:
                retry = send + RETRY_MS[0] + int(rnd() * (RETRY_MS[1] - RETRY_MS[0]))
                attempts.append((retry, DUPLICATE))
            for sent, dup in attempts:
                received = sent + LATENCY_MS[0] + int(rnd() * (LATENCY_MS[1] - LATENCY_MS[0] + 1))
                for t, topic, eid, body, flags, order in events[i:stop]:
                    out.append(
                        (received, j, len(out), topic, eid, uid, body, flags | dup, t + skew,
                         sent + skew)
                    )
                    if order and not dup:
                        self._order(received, uid, *order)
            i = stop

    def _order(self, checkout_received: int, uid: str, eid: str, body: str) -> None:
        """The server creates the order on its own clock; its producer may retry too."""
        rnd, out, j = self.r.random, self.out, self.j
        created = checkout_received + 5 + int(rnd() * 46)
        out.append((created + 1 + int(rnd() * 5), j, len(out), ORDERS, eid, uid, body, 0,
                    created, created))
        if rnd() < P_RETRY:
            sent = created + RETRY_MS[0] + int(rnd() * (RETRY_MS[1] - RETRY_MS[0]))
            out.append((sent + 1 + int(rnd() * 5), j, len(out), ORDERS, eid, uid, body, DUPLICATE,
                        created, sent))
