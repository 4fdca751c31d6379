"""NDJSON records of the demo shop's topics, with ISO timestamps, for landing files."""

from __future__ import annotations

from collections.abc import Sequence
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
