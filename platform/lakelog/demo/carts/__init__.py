"""Event sourcing: the shopping cart as an aggregate folded from its command log.

`CartAggregate` declares the consumer of a cart topic (``cart_events``) that validates each
command against the cart's state (refused ones are kept with their reason), keeps the current
state per cart, snapshots and the orders of checkouts (its outbox, which
`lakelog.sourcing.publish_outbox` relays to a topic exactly once); `verify` checks that
replaying the log rebuilds the live state. It implements `lakelog.sourcing.Aggregate`.
"""

from lakelog.demo.carts.aggregate import CartAggregate
from lakelog.demo.carts.fold import REASONS, Reason
from lakelog.demo.carts.replay import replay_from_snapshots, replay_full, verify

__all__ = [
    "REASONS",
    "CartAggregate",
    "Reason",
    "replay_from_snapshots",
    "replay_full",
    "verify",
]
