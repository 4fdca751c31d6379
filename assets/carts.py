"""The cart aggregate in Dagster: the relay that publishes its orders, and the replay check."""

from collections.abc import Mapping
from datetime import datetime, timezone

import dagster as dg

from lakelog.assets.errors import engine_errors
from lakelog.assets.naming import output_key, topic_key
from lakelog.demo.carts import CartAggregate, publish_orders, verify
from lakelog.errors import ConsumerBusyError
from lakelog.log.topics import Topic
from lakelog.resources import LakeResource


def orders_relay_asset(aggregate: CartAggregate) -> dg.AssetsDefinition:
    """``log/<orders topic>``: the aggregate's decided orders (its outbox), published once each."""
    topic = aggregate.orders_topic

    @dg.asset(
        key=topic_key(topic),
        deps=[output_key(aggregate.orders)],
        group_name="log",
        kinds={"spark", "delta"},
        description=f"Orders of accepted checkouts, relayed from {aggregate.orders.path} "
        "exactly once (the relay's cursor commits with the append).",
    )
    def _relay(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
        with engine_errors():
            result = publish_orders(lake.open(), aggregate, now=datetime.now(timezone.utc))
        context.log.info(f"published {result.orders} orders of batches {result.batches}")
        return dg.MaterializeResult(
            metadata={"orders_published": result.orders,
                      "batches": list(result.batches) if result.batches else []}
        )

    return _relay


def replay_check(
    aggregate: CartAggregate, topics: Mapping[str, Topic]
) -> dg.AssetChecksDefinition:
    """Rebuilding the carts from the latest snapshots plus the tail, and from offset 0, both
    equal the live state."""
    commands = topics[aggregate.topic]

    @dg.asset_check(
        asset=output_key(aggregate.state),
        name="replay_matches",
        description="A full replay of the command log and a replay from the latest snapshots "
        "both rebuild the live cart state.",
    )
    def _replay_matches(lake: LakeResource) -> dg.AssetCheckResult:
        try:
            with engine_errors():
                check = verify(lake.open(), aggregate, commands)
        except dg.Failure as failure:
            if isinstance(failure.__cause__, ConsumerBusyError):
                return dg.AssetCheckResult(
                    passed=False, severity=dg.AssetCheckSeverity.WARN,
                    description=f"not comparable now: {failure.__cause__}",
                )
            raise
        return dg.AssetCheckResult(
            passed=check.passed,
            metadata={
                "batch": check.batch, "carts": check.carts,
                "from_snapshots": check.from_snapshots,
                "mismatches": dict(check.mismatches),
                "unverifiable": dict(check.unverifiable),
                "differences": [str(d) for d in check.differences],
            },
        )

    return _replay_matches
