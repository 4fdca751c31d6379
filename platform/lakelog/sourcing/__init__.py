"""Event sourcing: aggregates folded from their command logs, and their outbox relayed to a topic.

An `Aggregate` is a consumer that folds a topic of commands into current state, deciding events
as it goes (DDIA ch. 11, "Event sourcing"): it writes the state, and the events it decided to an
outbox table, in one exactly-once microbatch. `publish_outbox` relays the outbox to a topic
exactly once, so downstream consumers read those events like any other topic; `ReplayCheck` is
what an aggregate's `verify` reports after rebuilding its state from the log.

The engine knows aggregates only through this interface; the demo shop's carts
(`lakelog.demo.carts.CartAggregate`) are one implementation.
"""

from lakelog.sourcing.aggregate import (
    REBUILDS,
    Aggregate,
    Difference,
    Rebuild,
    ReplayCheck,
)
from lakelog.sourcing.outbox import (
    PublishResult,
    consume_and_publish,
    decided_through,
    publish_outbox,
    published_through,
    relay_app_id,
)

__all__ = [
    "REBUILDS",
    "Aggregate",
    "Difference",
    "PublishResult",
    "Rebuild",
    "ReplayCheck",
    "consume_and_publish",
    "decided_through",
    "publish_outbox",
    "published_through",
    "relay_app_id",
]
