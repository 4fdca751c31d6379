"""The landing-zone sensor: new landing files of a topic become a run that ingests them."""


import json
from collections.abc import Mapping

import dagster as dg

from lakelog import landing
from lakelog.assets.naming import TOPIC_TAG, topic_key
from lakelog.resources import LakeResource
from lakelog.sensors.cursors import digest
from lakelog.topics import Topic


def landing_sensor(
    topics: Mapping[str, Topic], *, minimum_interval_seconds: int = 30
) -> dg.SensorDefinition:
    """One run per topic with files not yet requested.

    The cursor is ``{topic: {file: size}}``: every pending file already requested. A file stays
    in it while it is pending (even while the run that will ingest it is queued) and drops out
    once a run has planned it, so the cursor is bounded by the landing zone's backlog. A file
    that grew since it was requested is requested again, as the ingest will take it again.

    The run key is the topic, its last ingested batch and a digest of the sorted new files: the
    same files are never requested twice, yet a file removed after its ingest and dropped again
    (which the ingest takes again) gets a new key.
    """

    @dg.sensor(
        name="landing_zone",
        target=dg.AssetSelection.assets(*[topic_key(t) for t in topics.values()]),
        minimum_interval_seconds=minimum_interval_seconds,
        description="Requests an ingest of each topic with new files under landing/<topic>/.",
    )
    def _landing_zone(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
        the_lake = lake.open()
        requested: dict[str, dict[str, int]] = json.loads(context.cursor or "{}")
        cursor: dict[str, dict[str, int]] = {}
        runs = []
        for topic in topics.values():
            if not the_lake.list_files(landing.landing_path(topic.name)):
                continue
            manifest = landing.load_manifest(the_lake, topic.name)
            pending = landing.pending_files(the_lake, manifest)
            before = requested.get(topic.name, {})
            new = sorted((f, size) for f, size in pending if before.get(f) != size)
            if pending:
                cursor[topic.name] = dict(pending)
            if new:
                runs.append(
                    dg.RunRequest(
                        run_key=f"{topic.name}:{manifest.batch}:{digest(new)}",
                        asset_selection=[topic_key(topic)],
                        tags={TOPIC_TAG: topic.name},
                    )
                )
        next_cursor = json.dumps(cursor, sort_keys=True)
        if not runs:
            return dg.SensorResult(skip_reason="no new landing files", cursor=next_cursor)
        return dg.SensorResult(run_requests=runs, cursor=next_cursor)

    return _landing_zone
