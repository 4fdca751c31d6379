"""kill -9 of a consumer group member in the middle of a batch: once its session times out, a
surviving member takes its partitions over and finishes its batch from the plan, losing and
doubling nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from engine_helpers import drop, record
from member_process import CONSUMER, COPY, TOPIC
from processes import subprocess_env

from lakelog.consumers import checkpoints, groups, lag, membership, units
from lakelog.log import ingest

HERE = Path(__file__).resolve().parent


def clock():
    return datetime.now(timezone.utc)


def wait_for(condition, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow
def test_a_member_killed_mid_batch_is_taken_over_exactly_once(lake, spark, now):
    records = [record(i) for i in range(60)]
    drop(lake.root, TOPIC.name, "a.ndjson", records)
    ingest.ingest(lake, spark, TOPIC, now=now)
    topics = {TOPIC.name: TOPIC}
    dawdle = Path(lake.root) / "dawdle"
    dawdle.touch()
    env = subprocess_env(PYTHONPATH=os.pathsep.join(
        [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    victim = subprocess.Popen([sys.executable, str(HERE / "member_process.py"), lake.root,
                               "victim"], env=env, start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    every = units.units_of(CONSUMER, topics)
    try:
        wait_for(lambda: victim.poll() is not None or any(
            lake.exists(f"_checkpoints/{u.checkpoint}")
            and checkpoints.load(lake, u.checkpoint).plan is not None for u in every),
            "the member to plan a batch")
        assert victim.poll() is None, victim.stdout.read().decode()[-3000:]
        os.killpg(victim.pid, 9)  # kill -9, mid-batch: planned, nothing committed
        victim.wait()
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, 9)
    dawdle.unlink()
    assert membership.load(lake, CONSUMER.name).members.keys() == {"victim"}  # it never left
    planned = [u.partition for u in every if checkpoints.load(lake, u.checkpoint).plan]

    # The survivor heartbeats after the dead member's session timed out: it owns everything.
    later = lambda: clock() + membership.SESSION_TIMEOUT + timedelta(seconds=1)  # noqa: E731
    results = groups.run_member(lake, CONSUMER, topics, member="survivor", now=later)

    assert results[0].resumed and set(planned) <= set(results[0].partitions)
    copied = lake.read(lake.snapshot(COPY.path)).collect()
    assert sorted(r.event_id for r in copied) == sorted(r["event_id"] for r in records)
    assert len({(r.partition, r.offset) for r in copied}) == len(records)
    assert sum(p.lag for p in lag(lake, CONSUMER, topics)) == 0
    assert membership.load(lake, CONSUMER.name).members == {}
