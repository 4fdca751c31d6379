"""The demo shop's simulated users: their sessions (page views, searches, clicks on results,
cart commands, the orders checkouts create) and the requests their devices send, late,
batched, retried and with skewed clocks, as `lakelog.demo.workload` describes. Each chunk of
sessions draws from its own seeded `random.Random`, so it is the same whenever it is made.
"""

from __future__ import annotations

import random

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


def _price(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


class Catalog:
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


class Chunk:
    """The sessions starting in simulated minute `j` of a workload of `events` events from
    `start_ms`, by users whose device clocks are off by `skews` (one a user), and the records
    their devices send."""

    def __init__(self, j: int, catalog: Catalog, skews: list[int], *, seed: int, events: int,
                 start_ms: int) -> None:
        self.r = random.Random(f"{seed}:{j}")
        self.j, self.cat, self.skews, self.users = j, catalog, skews, len(skews)
        self.t0 = start_ms + j * CHUNK_MS
        self.quota = min(EVENTS_PER_CHUNK, events - j * EVENTS_PER_CHUNK)
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
