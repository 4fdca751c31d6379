"""NDJSON records of the demo shop's topics, with ISO timestamps, and landing files of them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any


def _ts(second: int) -> str:
    return f"2026-01-05T08:{second // 60:02d}:{second % 60:02d}.123Z"


def _times(second: int) -> dict[str, str]:
    return {
        "device_time": _ts(second),
        "sent_time": _ts(second + 1),
        "received_time": _ts(second + 2),
    }


def page_view(event_id: str, user: str, product: str | None, second: int = 0) -> dict[str, Any]:
    return {
        "event_id": event_id, "user_id": user, "session_id": f"s-{user}",
        "page": "product" if product else "home", "product_id": product, **_times(second),
    }


def cart_event(
    event_id: str, user: str, action: str, product: str, quantity: int = 1,
    price: float = 10.0, second: int = 0,
) -> dict[str, Any]:
    return {
        "event_id": event_id, "user_id": user, "session_id": f"s-{user}", "cart_id": f"c-{user}",
        "action": action, "product_id": product, "quantity": quantity, "unit_price": price,
        **_times(second),
    }


def order(
    event_id: str, user: str, items: Sequence[tuple[str, int, float]], second: int = 0
) -> dict[str, Any]:
    return {
        "event_id": event_id, "user_id": user, "session_id": f"s-{user}",
        "order_id": f"o-{event_id}", "cart_id": f"c-{user}",
        "items": [{"product_id": p, "quantity": q, "unit_price": u} for p, q, u in items],
        "total": sum(q * u for _, q, u in items), **_times(second),
    }


#: What `shop_template` ingests; its product totals are `SHOP_TOTALS`.
SHOP_FILES = {
    ("page_views", "a.ndjson"): [
        page_view("v1", "u1", "p1", 1), page_view("v2", "u2", "p1", 2),
        page_view("v3", "u3", "p2", 3), page_view("v4", "u1", None, 4),
    ],
    ("cart_events", "a.ndjson"): [
        cart_event("c1", "u1", "add", "p1", quantity=2, price=10.0, second=5),
        cart_event("c2", "u2", "add", "p2", quantity=1, price=4.5, second=6),
        cart_event("c3", "u2", "remove", "p2", quantity=1, price=4.5, second=7),
    ],
    ("orders", "a.ndjson"): [order("o1", "u1", [("p1", 2, 10.0), ("p2", 1, 4.5)], 8)],
    # A second batch of page views: u1's log partition then has two files (see retention).
    ("page_views", "b.ndjson"): [page_view("v5", "u1", "p2", 9)],
}
SHOP_TOTALS = {  # views, cart adds, cart removes, orders, units sold, revenue
    "p1": (2, 1, 0, 1, 2, Decimal("20.00")),
    "p2": (2, 1, 1, 1, 1, Decimal("4.50")),
}
SHOP_RECORDS = sum(len(records) for records in SHOP_FILES.values())


def land_file(
    root: str | Path, topic: str, name: str, records: Sequence[dict[str, Any]],
    extra_lines: Sequence[str] = (),
) -> Path:
    """Write `records` (and `extra_lines` as they are) as the NDJSON landing file `name` of
    `topic` under the lake `root`."""
    path = Path(root) / "landing" / topic / name
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n")
    return path
