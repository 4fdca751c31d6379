"""Replay assets: hourly time partitions of a windowed aggregate, recomputed from the retained log.

The live window table (``streams/<name>``) is advanced by microbatches, each touching whatever
hours its records fall in, so it is not itself partitioned. Its time-partitioned twin
``replays/<name>`` is the unit of backfill: a partition (or a range, in one run) is recomputed
from the log, and the check ``matches_live`` compares it with what the live microbatches
produced for those hours.
"""

from collections.abc import Iterator, Mapping

import dagster as dg

from lakelog.assets.errors import engine_errors
from lakelog.assets.naming import topic_key
from lakelog.assets.partitions import HOURLY
from lakelog.log.topics import Topic
from lakelog.resources import LakeResource
from lakelog.windows import WindowedAggregate
from lakelog.windows.replay import compare, replay_path, replay_windows, retained_from, write_replay

CHECK = "matches_live"


def replay_asset(agg: WindowedAggregate, topics: Mapping[str, Topic]) -> dg.AssetsDefinition:
    key = dg.AssetKey(replay_path(agg).split("/"))
    live = dg.AssetKey(agg.windows.path.split("/"))

    @dg.asset(
        key=key,
        partitions_def=HOURLY,
        backfill_policy=dg.BackfillPolicy.single_run(),
        deps=[live, *(topic_key(t) for t in agg.topics)],
        group_name="replays",
        kinds={"spark", "delta"},
        description=(
            f"The windows of {agg.windows.path} starting in each hour, recomputed from the "
            f"retained log of {', '.join(agg.topics)}; backfill a range to replay it. The check "
            f"{CHECK} compares them with the live microbatches' windows."
        ),
        check_specs=[
            dg.AssetCheckSpec(
                CHECK,
                asset=key,
                description="Replayed windows equal the live ones (revision counters aside).",
            )
        ],
    )
    def _replay(context: dg.AssetExecutionContext, lake: LakeResource) -> Iterator:
        hours = context.partition_time_window
        the_lake = lake.open()
        with engine_errors():
            rows = replay_windows(the_lake, agg, topics, start=hours.start, end=hours.end)
            rows = rows.persist()
            try:
                version = write_replay(the_lake, agg, rows, start=hours.start, end=hours.end)
                result = compare(
                    the_lake, agg, start=hours.start, end=hours.end, replayed=rows,
                    retained=retained_from(the_lake, agg, topics),
                )
                windows = rows.count()
            finally:
                rows.unpersist()
        yield dg.MaterializeResult(
            metadata={
                "windows": windows,
                "from": dg.MetadataValue.timestamp(hours.start),
                "to": dg.MetadataValue.timestamp(hours.end),
                "delta_version": version,
            }
        )
        yield dg.AssetCheckResult(
            check_name=CHECK,
            passed=result.matches,
            metadata={
                "compared": result.compared,
                "missing_live": result.missing,
                "extra_live": result.extra,
                "differing": result.differing,
                "left_out_dropped_late": result.dropped_late,
                "left_out_beyond_retention": result.beyond_retention,
                "samples": dg.MetadataValue.json(list(result.samples)),
            },
        )

    return _replay
