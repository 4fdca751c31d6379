"""Event-sourced aggregates in Dagster: the relay that publishes an aggregate's outbox to its
topic, and the check that replaying the command log rebuilds the live state."""

from collections.abc import Mapping
from datetime import datetime, timezone

import dagster as dg

from lakelog.assets.errors import engine_errors
from lakelog.assets.naming import output_key, topic_key
from lakelog.errors import ConsumerBusyError
from lakelog.log.topics import Topic
from lakelog.resources import LakeResource
from lakelog.sourcing import Aggregate, publish_outbox


def outbox_relay_asset(aggregate: Aggregate) -> dg.AssetsDefinition:
    """``log/<outbox topic>``: the events the aggregate decided (its outbox), each published
    once."""
    topic = aggregate.outbox_topic

    @dg.asset(
        key=topic_key(topic),
        deps=[output_key(aggregate.outbox)],
        group_name="log",
        kinds={"spark", "delta"},
        description=f"Events decided by {aggregate.consumer.name}, relayed from "
        f"{aggregate.outbox.path} exactly once (the relay's cursor commits with the append).",
    )
    def _relay(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
        with engine_errors():
            result = publish_outbox(lake.open(), aggregate, now=datetime.now(timezone.utc))
        context.log.info(f"published {result.events} events of batches {result.batches}")
        return dg.MaterializeResult(
            metadata={"events_published": result.events,
                      "batches": list(result.batches) if result.batches else []}
        )

    return _relay


def replay_check(
    aggregate: Aggregate, topics: Mapping[str, Topic]
) -> dg.AssetChecksDefinition:
    """Rebuilding the state from the latest snapshots plus the tail, and from offset 0, both
    equal the live state."""
    commands = topics[aggregate.topic]

    @dg.asset_check(
        asset=output_key(aggregate.state),
        name="replay_matches",
        description="A full replay of the command log and a replay from the latest snapshots "
        "both rebuild the live state.",
    )
    def _replay_matches(lake: LakeResource) -> dg.AssetCheckResult:
        try:
            with engine_errors():
                check = aggregate.verify(lake.open(), commands)
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
                "batch": check.batch, "states": check.states,
                "from_snapshots": check.from_snapshots,
                "mismatches": dict(check.mismatches),
                "unverifiable": dict(check.unverifiable),
                "differences": [str(d) for d in check.differences],
            },
        )

    return _replay_matches
