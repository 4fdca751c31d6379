"""Consumer assets: a consumer's output tables, advanced by exactly-once microbatches."""

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Optional

import dagster as dg
from pydantic import Field

from lakelog.assets.errors import engine_errors
from lakelog.assets.gates import blocked_consumer
from lakelog.assets.metadata import lag_table
from lakelog.assets.naming import CONSUMER_TAG, consumer_pool, op_name, output_key, topic_key
from lakelog.cdc.compacted import change_counts
from lakelog.consumers import Consumer, Role, lag, run_until_caught_up
from lakelog.consumers import units
from lakelog.consumers.watermarks import from_us
from lakelog.errors import ConfigError
from lakelog.log.topics import Topic
from lakelog.resources import LakeResource

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )


class MicrobatchConfig(dg.Config):
    max_batches: Optional[int] = Field(
        default=None, description="Stop after this many microbatches (default: until caught up)."
    )


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _rows(the_lake, path: str) -> int:
    if not the_lake.exists(path):
        return 0
    return sum(f.num_records for f in the_lake.snapshot(path).files())


def event_time_metadata(state: Mapping[str, object]) -> dict[str, dg.MetadataValue]:
    """The watermark and greatest event time of a consumer that keeps them (windows, joins); of
    a consumer of several topics also each topic's, the least of which holds the watermark."""
    found = {}
    for key, label in (("watermark_us", "watermark"), ("max_event_us", "max_event_time")):
        if isinstance(state.get(key), int):
            found[label] = dg.MetadataValue.timestamp(from_us(state[key]))
    inputs = state.get("inputs")
    for topic, seen in sorted(inputs.items()) if isinstance(inputs, Mapping) else ():
        found[f"max_event_time of {topic}"] = dg.MetadataValue.timestamp(
            from_us(seen["max_event_us"]))
    return found


def consumer_asset(
    consumer: Consumer, topics: Mapping[str, Topic], *, gates: Sequence[dg.AssetCheckKey] = ()
) -> dg.AssetsDefinition:
    """One asset per output of `consumer`, all written by the same microbatches.

    The op carries the consumer tag and its own pool (both limited to one run in
    deploy/dagster.yaml), so two microbatch runs of one consumer never execute at once. Should
    they anyway, the engine's commit guards fail one with `ConcurrentWriteError`, which fails
    its run with that message.

    `gates` are the blocking checks of the tables it reads: while the latest execution of one
    did not pass, in any run (`lakelog.assets.gates`), the consumer consumes nothing and
    materializes nothing — its outputs are skippable, so their downstream steps are skipped —
    and reports on each output an observation naming the check.
    """
    missing = [t for t in consumer.topics if t not in topics]
    if missing:
        raise ConfigError(f"consumer {consumer.name} reads undeclared topics: {', '.join(missing)}")
    reads = {name: topics[name] for name in consumer.topics}
    deps = [topic_key(t) for t in consumer.topics]
    deps += [dg.AssetKey(path.split("/")) for path in consumer.reads]
    specs = [
        dg.AssetSpec(
            output_key(o),
            deps=deps,
            group_name=o.path.split("/")[0].lstrip("_"),  # streams, tables, history, state
            kinds={"spark", "delta"},
            description=(
                f"Written by consumer {consumer.name} from "
                f"{', '.join((*consumer.topics, *consumer.reads))}."
            ),
            skippable=True,
        )
        for o in consumer.outputs
    ]

    @dg.multi_asset(
        name=op_name("consume", consumer.name),
        specs=specs,
        can_subset=False,
        op_tags={CONSUMER_TAG: consumer.name},
        pool=consumer_pool(consumer),
    )
    def _consume(
        context: dg.AssetExecutionContext, config: MicrobatchConfig, lake: LakeResource
    ) -> Iterator[dg.MaterializeResult]:
        if blocked_consumer(context, consumer, gates):
            return
        the_lake = lake.open()
        before = {
            o.path: the_lake.snapshot(o.path).version if the_lake.exists(o.path) else -1
            for o in consumer.outputs
        }
        late_outputs = [o.path for o in consumer.outputs if o.role is Role.LATE]
        late_before = sum(_rows(the_lake, p) for p in late_outputs)
        with engine_errors():
            batches = run_until_caught_up(
                the_lake, consumer, reads, now=_now, max_batches=config.max_batches
            )
            # Read once for the lag and the event-time metadata.
            checkpoint = units.load_all(the_lake, consumer, reads)
            lags = lag(the_lake, consumer, reads, checkpoint=checkpoint)
        context.log.info(f"consumer {consumer.name}: {len(batches)} microbatches")
        metadata = {
            "batches": len(batches),
            # An idle tick is an empty batch that only moves a watermark on with the clock.
            "idle_ticks": sum(1 for b in batches if b.records == 0),
            "records": sum(b.records for b in batches),
            "batch_ids": [b.batch for b in batches],
            "resumed": any(b.resumed for b in batches),
            "lost_to_retention": sum(b.lost_to_retention for b in batches),
            "lag": lag_table(lags),
            "lag_total": sum(x.lag for x in lags),
            **event_time_metadata(checkpoint.state),
        }
        snapshots = {
            o.path: the_lake.snapshot(o.path) if the_lake.exists(o.path) else None
            for o in consumer.outputs
        }
        rows = {
            path: sum(f.num_records for f in snapshot.files()) if snapshot else 0
            for path, snapshot in snapshots.items()
        }
        if late_outputs:
            metadata["late_records"] = sum(rows[p] for p in late_outputs) - late_before
        for output in consumer.outputs:
            snapshot = snapshots[output.path]
            # A merge-on-read table's files hold versions until a squash: its file statistics
            # count versions, and counting rows would be a resolving read of the whole table.
            extra = ({"stored_versions": rows[output.path]} if output.merge_on_read
                     else {"dagster/row_count": rows[output.path]})
            if snapshot and output.role is Role.COMPACTED:
                extra.update(
                    change_counts(the_lake, output.path, before[output.path] + 1, snapshot.version)
                )
            yield dg.MaterializeResult(asset_key=output_key(output), metadata={**metadata, **extra})

    return _consume


def consumer_job(
    consumer: Consumer, asset: dg.AssetsDefinition
) -> "UnresolvedAssetJobDefinition":
    """The job that runs `consumer` by hand: its runs carry the consumer tag the queue limits."""
    return dg.define_asset_job(
        name=op_name("microbatch", consumer.name),
        selection=dg.AssetSelection.assets(asset),
        tags={CONSUMER_TAG: consumer.name},
        description=f"Microbatches of consumer {consumer.name} until caught up.",
    )
