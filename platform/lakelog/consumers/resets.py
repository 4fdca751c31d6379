"""Offset resets that keep derived data right: refused where a replay would count records twice,
and rebuilds, which derive a consumer's outputs again from the retained log (DDIA ch. 11:
derived views are rebuilt by replaying the log).

A reset that moves offsets back replays records into the consumer's outputs. Whether that is
harmless the pipeline declaration says (`Pipeline.replay_hazards`): plain appends and a captured
source's tables take it; keyed totals, windows and other stateful outputs would apply the
records a second time. For those, `reset_consumer` refuses a reset that replays, and
`rebuild_consumer` does what is right instead:

1. refuse while a batch is planned but not committed (it must finish first), or when what the
   consumer decided was already published elsewhere (`Pipeline.rebuild_hazards`);
2. replace every output by an empty table (a new table id, so incremental models that read it
   rebuild too), and a windowed aggregate's backfill replays (`Pipeline.rebuilt_besides`);
3. commit the target offsets and an empty state (watermarks, windows kept in the checkpoint)
   relative to the checkpoint read in step 1: if a batch committed meanwhile, this fails
   without committing.

The consumer's next batches then derive everything from the target offsets on, as a fresh
consumer starting there would. A crash or failure between steps 2 and 3 leaves the outputs
empty and the offsets where they were — records are missing until then, never doubled — and
running the rebuild again completes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from lakelog.consumers import units
from lakelog.consumers.backlog import lag, positions
from lakelog.consumers.checkpoints import TopicPartition
from lakelog.consumers.consumer import Consumer
from lakelog.errors import ConsumerBusyError, UnsafeReplayError
from lakelog.lake import Lake
from lakelog.log.offsets import offsets_for_time
from lakelog.log.topics import Topic
from lakelog.pipeline import Pipeline

Target = Literal["earliest", "latest"] | datetime


def target_offsets(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    *,
    to: Target,
) -> dict[TopicPartition, int]:
    """The offsets a reset `to` commits, per topic and log partition the consumer reads:
    the log start, the head, or the first record appended at or after a time."""
    topic_map = consumer.topics_in(topics)
    known = positions(lake, topic_map)
    if to == "earliest":
        return {tp: start for tp, (start, _) in known.items()}
    if to == "latest":
        return {tp: head for tp, (_, head) in known.items()}
    offsets = {}
    for name, topic in topic_map.items():
        if lake.exists(topic.path):
            found = offsets_for_time(lake, lake.snapshot(topic.path), topic.partitions, to)
            offsets.update({(name, p): o for p, o in found.items()})
    return offsets


def reset_offsets(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    *,
    to: Target,
    now: datetime,
) -> dict[TopicPartition, int]:
    """Move the committed offsets (like kafka-consumer-groups --reset-offsets).

    Refused while a batch is planned but not committed: that batch must finish first. Whether
    replaying records into the outputs is right is for `reset_consumer` and `rebuild_consumer`.
    """
    if consumer.members:
        units.seed(lake, consumer, topics, now=now)
    loaded = units.load_units(lake, consumer, topics)
    offsets = target_offsets(lake, consumer, topics, to=to)
    units.save_offsets(lake, loaded, offsets, now=now)  # refuses a batch in progress
    return offsets


@dataclass(frozen=True)
class Rebuilt:
    consumer: str
    offsets: dict[TopicPartition, int]
    #: The tables emptied: outputs, and a window's replays (a table not made yet is left to
    #: its first write).
    emptied: tuple[str, ...]


def replayed_records(
    lake: Lake, pipeline: Pipeline, name: str, offsets: dict[TopicPartition, int]
) -> int:
    """How many committed records moving consumer `name` to `offsets` would consume again."""
    consumer = pipeline.consumer(name)
    committed = {(p.topic, p.partition): p.committed
                 for p in lag(lake, consumer, pipeline.all_topics)}
    return sum(max(committed.get(tp, o) - o, 0) for tp, o in offsets.items())


def reset_consumer(
    lake: Lake, pipeline: Pipeline, name: str, *, to: Target, now: datetime
) -> dict[TopicPartition, int]:
    """Move consumer `name`'s offsets to `to`, unless that replays records into outputs that
    would count them twice (`UnsafeReplayError`, with the reasons); moving forward skips
    records and is always allowed."""
    consumer = pipeline.consumer(name)
    hazards = pipeline.replay_hazards(name)
    if hazards:
        offsets = target_offsets(lake, consumer, pipeline.all_topics, to=to)
        again = replayed_records(lake, pipeline, name, offsets)
        if again:
            raise UnsafeReplayError(
                f"resetting consumer {name} to {_label(to)} would replay {again:,} records it "
                f"has consumed: {'; '.join(hazards)}. Rebuild its outputs from the log instead "
                "(lakelog offsets reset --rebuild)"
            )
    return reset_offsets(lake, consumer, pipeline.all_topics, to=to, now=now)


def rebuild_consumer(
    lake: Lake, pipeline: Pipeline, name: str, *, to: Target, now: datetime
) -> Rebuilt:
    """Empty consumer `name`'s outputs and state and move its offsets to `to` (module
    docstring: the steps and what a crash between them leaves)."""
    consumer = pipeline.consumer(name)
    refusals = pipeline.rebuild_hazards(name)
    if refusals:
        raise UnsafeReplayError(f"consumer {name} cannot be rebuilt: {'; '.join(refusals)}")
    if consumer.members:
        units.seed(lake, consumer, pipeline.all_topics, now=now)
    loaded = units.load_units(lake, consumer, pipeline.all_topics)  # step 1
    checkpoint = units.merged(name, loaded)
    if checkpoint.plan is not None:
        raise ConsumerBusyError(
            f"consumer {name} has batch {checkpoint.plan.batch} in progress; let it finish "
            "(or rerun it if it crashed) before rebuilding it"
        )
    offsets = target_offsets(lake, consumer, pipeline.all_topics, to=to)
    emptied = []
    tables = [(o.path, o.schema) for o in consumer.outputs] + list(pipeline.rebuilt_besides(name))
    for path, schema in tables:  # step 2
        if lake.exists(path):
            lake.replace_table(path, schema)
            emptied.append(path)
    units.save_offsets(lake, loaded, offsets, now=now, state={})  # step 3
    return Rebuilt(name, offsets, tuple(emptied))


def _label(to: Target) -> str:
    return to.isoformat() if isinstance(to, datetime) else to
