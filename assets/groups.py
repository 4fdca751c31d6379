"""A consumer group's members as Dagster runs: the ``members_<consumer>`` job, one partition per
member, so a backfill of its partitions (or one run per partition) runs the members in parallel.

The member's op carries neither the consumer tag nor the consumer's pool, which allow one run of
a consumer at a time: members run at once by design, and the group's generations and claims keep
each log partition exactly-once (`lakelog.consumers.groups`). The consumer's asset in the
pipeline job stays as it is: it runs the group's partitions itself while no member is live, and
joins as one more member while some are.
"""

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Optional

import dagster as dg
from pydantic import Field

from lakelog.assets.errors import engine_errors
from lakelog.assets.gates import blocked_consumer
from lakelog.assets.metadata import lag_table
from lakelog.assets.naming import op_name, output_key
from lakelog.consumers import Consumer, lag
from lakelog.consumers.groups import run_member
from lakelog.consumers.membership import SESSION_TIMEOUT
from lakelog.log.topics import Topic
from lakelog.resources import LakeResource


class MemberConfig(dg.Config):
    session_timeout_seconds: float = Field(
        default=SESSION_TIMEOUT.total_seconds(),
        description="A member silent this long is dead and its log partitions move to the "
        "others; a batch must take less.",
    )
    max_batches: Optional[int] = Field(
        default=None, description="Leave after this many microbatches (default: caught up)."
    )


def member_names(consumer: Consumer) -> list[str]:
    return [f"member-{k}" for k in range(consumer.members)]


def members_job(
    consumer: Consumer, topics: Mapping[str, Topic], *, gates: Sequence[dg.AssetCheckKey] = ()
) -> dg.JobDefinition:
    """The job whose runs are the members of `consumer`'s group, its partition the member."""
    reads = {name: topics[name] for name in consumer.topics}

    @dg.op(name=op_name("member", consumer.name), out={},
           description=f"One member of consumer group {consumer.name}.")
    def _member(
        context: dg.OpExecutionContext, config: MemberConfig, lake: LakeResource
    ) -> Iterator[dg.AssetMaterialization]:
        if blocked_consumer(context, consumer, gates):
            return
        the_lake = lake.open()
        member = context.partition_key
        with engine_errors():
            results = run_member(
                the_lake, consumer, reads, member=member,
                now=lambda: datetime.now(timezone.utc),
                timeout=timedelta(seconds=config.session_timeout_seconds),
                max_batches=config.max_batches,
            )
            lags = lag(the_lake, consumer, reads)
        partitions = sorted({k for r in results for k in r.partitions})
        context.log.info(f"member {member} of {consumer.name}: {len(results)} microbatches "
                         f"over log partitions {partitions}")
        metadata = {
            "member": member,
            "log_partitions": partitions,
            "batches": len(results),
            "records": sum(r.records for r in results),
            "resumed": any(r.resumed for r in results),
            "lag": lag_table(lags),
            "lag_total": sum(x.lag for x in lags),
        }
        for output in consumer.outputs:
            yield dg.AssetMaterialization(asset_key=output_key(output), metadata=metadata)

    @dg.job(
        name=op_name("members", consumer.name),
        partitions_def=dg.StaticPartitionsDefinition(member_names(consumer)),
        description=f"The members of consumer group {consumer.name}: one run per partition "
        "(member); a backfill of every partition runs the whole group.",
    )
    def _job() -> None:
        _member()

    return _job
