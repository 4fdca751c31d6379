"""The demo shop's event patterns (complex event processing, `lakelog.patterns`).

- **Abandoned carts**: per cart, products added with no order within 30 minutes of the first
  add (decided once the watermark passes 32 minutes after it).
- **Search refinements**: per session, a search followed by another within two minutes with no
  click in between: the first results did not help.

A match is decided once the watermark passes its first event + `within`, so the allowed lateness
is short (two minutes: a straggler older than that is a late record, kept in the late table)
to show matches within minutes of event time.
"""

from __future__ import annotations

from datetime import timedelta

from lakelog.consumers.watermarks import Watermark
from lakelog.demo.shop import CART_EVENTS, CLICKS, ORDERS, SEARCHES
from lakelog.patterns import Absent, Measure, Pattern, Step

WATERMARK = Watermark(lateness=timedelta(minutes=2), idle_timeout=timedelta(minutes=5))

ABANDONED_CARTS = Pattern(
    name="abandoned_carts",
    topics=(CART_EVENTS, ORDERS),
    key=("cart_id",),
    elements=(Step("added", "cart_events", "action = 'add'", "+"), Absent("ordered", "orders")),
    within=timedelta(minutes=30),
    watermark=WATERMARK,
    measures=(
        Measure("user_id", "added", "first", "user_id"),
        Measure("items_added", "added", "count"),
        Measure("first_product", "added", "first", "product_id"),
        Measure("last_added", "added", "last", "event_time"),
    ),
)

SEARCH_REFINEMENTS = Pattern(
    name="search_refinements",
    topics=(SEARCHES, CLICKS),
    key=("session_id",),
    elements=(Step("searched", "searches"), Absent("clicked", "clicks"),
              Step("refined", "searches")),
    within=timedelta(minutes=2),
    watermark=WATERMARK,
    measures=(
        Measure("user_id", "searched", "first", "user_id"),
        Measure("first_query", "searched", "first", "query"),
        Measure("refined_query", "refined", "first", "query"),
    ),
)

PATTERNS = {p.name: p for p in (ABANDONED_CARTS, SEARCH_REFINEMENTS)}
