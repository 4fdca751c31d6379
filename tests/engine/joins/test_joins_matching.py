"""Window join, one batch at a time (`lakelog.joins.match_batch`): matches, outer rows, late records."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from joins_helpers import Steps, at, click, local, search

from lakelog.demo.shop_joins import SEARCH_CLICKS
from lakelog.errors import ConfigError
from lakelog.joins import Side, WindowJoin


def pairs(rows):
    """(search, click, clicked) of each row; an unmatched click's search is None."""
    return sorted(((r["search_event_id"], r["click_event_id"], r["clicked"]) for r in rows),
                  key=str)


def test_matches_in_either_order_and_an_unmatched_search_once_its_window_closed(spark):
    steps = Steps(spark, SEARCH_CLICKS)
    # The click on q2 arrives a batch before its search.
    joined, late = steps.run([search("s1", 0, query="q1")], [click("c2", 5, query="q2")],
                             before=None, after=at(0))
    assert joined == [] and late == []
    joined, _ = steps.run([search("s2", 2, query="q2"), search("s3", 10, query="q3")],
                          [click("c1", 30, query="q1")], before=at(0), after=at(5))
    assert pairs(joined) == [("s1", "c1", True), ("s2", "c2", True)]
    row = next(r for r in joined if r["search_event_id"] == "s2")
    assert (row["search_time"], row["click_time"]) == (local(at(2)), local(at(5)))
    assert (row["batch"], row["hour"]) == (2, local(at(0)))
    assert row["session_id"] == "s1" and row["query_id"] == "q2" and row["position"] == 1

    # s1 and s2 close (matched: no outer row); s3's window is open until minute 70.
    joined, _ = steps.run([], [], before=at(5), after=at(65))
    assert joined == []
    assert sorted(r[1] for r in steps.buffer) == ["s3"]  # c1 and c2 are older than 65 too
    joined, _ = steps.run([], [], before=at(65), after=at(70))  # the window's end is inclusive
    assert joined == []
    joined, _ = steps.run([], [], before=at(70), after=at(71))
    assert pairs(joined) == [("s3", None, False)]
    assert joined[0]["product_id"] is None and joined[0]["batch"] == 5
    joined, _ = steps.run([], [], before=at(71), after=at(500))
    assert joined == [] and steps.buffer == []


def test_a_click_matches_every_open_window_of_its_key_and_bounds_are_inclusive(spark):
    steps = Steps(spark, SEARCH_CLICKS)
    searches = [search("a", 0, query="q"), search("b", 30, query="q"), search("c", 61, query="q"),
                search("d", 60, query="q", session="other")]
    joined, _ = steps.run(searches, [click("x", 60, query="q"), click("y", 30, query="q")],
                          before=None, after=None)
    assert pairs(joined) == [("a", "x", True), ("a", "y", True), ("b", "x", True),
                             ("b", "y", True)]
    joined, _ = steps.run([], [], before=None, after=at(200))
    assert pairs(joined) == [("c", None, False), ("d", None, False)]


def test_late_records_go_to_the_late_table_and_the_unmatched_row_stays(spark):
    steps = Steps(spark, replace(SEARCH_CLICKS, how="left"))  # a keyless click is late
    joined, _ = steps.run([search("s1", 0, query="q1"), search("s2", 50, query="q2")], [],
                          before=None, after=at(80))
    assert pairs(joined) == [("s1", None, False)]  # s1 closed; s2 is open until minute 110
    clicks = [
        click("c1", 10, query="q1"),  # for s1, after its unmatched row: every window closed
        click("c2", 70, query="q2"),  # for the open s2, but older than the watermark
        click("c3", 90, query=None),  # no key: can never match
        click("c4", 95, query="q2"),  # on time
    ]
    joined, late = steps.run([search("s0", 79, query="q0")], clicks, before=at(80), after=at(95))
    assert pairs(joined) == [("s2", "c4", True)]
    reasons = sorted((r["side"], r["event_id"], r["reason"]) for r in late)
    assert reasons == [("left", "s0", "behind_watermark"), ("right", "c1", "window_closed"),
                       ("right", "c2", "behind_watermark"), ("right", "c3", "null_key")]
    c1 = next(r for r in late if r["event_id"] == "c1")
    assert c1["topic"] == "clicks" and c1["watermark"] == local(at(80)) and c1["batch"] == 2
    assert '"product_id":"p-1"' in c1["record"] and c1["event_time"] == local(at(10))
    joined, _ = steps.run([], [], before=at(95), after=at(500))
    assert joined == []  # s1's unmatched row is not corrected, s2 matched: nothing more


def test_duplicate_deliveries_are_joined_once(spark):
    steps = Steps(spark, SEARCH_CLICKS)
    joined, _ = steps.run([search("s1", 0, query="q"), search("s1", 0, query="q")],
                          [click("c1", 1, query="q"), click("c1", 1, query="q")],
                          before=None, after=at(1))
    assert pairs(joined) == [("s1", "c1", True)]
    # Copies of buffered records are ignored; a copy after its record left is late.
    joined, late = steps.run([search("s1", 0, query="q")], [click("c1", 1, query="q")],
                             before=at(1), after=at(61))
    assert joined == [] and late == []
    joined, late = steps.run([search("s1", 0, query="q")], [], before=at(61), after=at(62))
    assert joined == [] and [(r["event_id"], r["reason"]) for r in late] == [
        ("s1", "behind_watermark")
    ]


def test_declaration_errors():
    with pytest.raises(ConfigError, match="key 'nope'"):
        replace(SEARCH_CLICKS, keys=("nope",))
    with pytest.raises(ConfigError, match="chosen twice"):
        replace(SEARCH_CLICKS, matched="query")
    with pytest.raises(ConfigError, match="two different topics"):
        replace(SEARCH_CLICKS, right=SEARCH_CLICKS.left)
    with pytest.raises(ConfigError, match="no column 'nope'"):
        Side(SEARCH_CLICKS.left.topic, (("x", "nope"),))
    with pytest.raises(ConfigError, match="within"):
        replace(SEARCH_CLICKS, within=timedelta(minutes=-1))
    with pytest.raises(ConfigError, match="lowercase"):
        WindowJoin("Bad", SEARCH_CLICKS.left, SEARCH_CLICKS.right, ("query_id",),
                   timedelta(hours=1), SEARCH_CLICKS.watermark)
    with pytest.raises(ConfigError, match="how must be one of left, right, full, not 'inner'"):
        replace(SEARCH_CLICKS, how="inner")


def test_a_full_join_emits_unmatched_records_of_both_sides_once_they_close(spark):
    steps = Steps(spark, replace(SEARCH_CLICKS, how="full"))
    # c1 is for s1; c2's search never comes; c3 has no key; s2 has no click.
    joined, late = steps.run(
        [search("s1", 0, query="q1"), search("s2", 5, query="q2")],
        [click("c1", 10, query="q1"), click("c2", 20, query="q9"), click("c3", 25, query=None)],
        before=None, after=at(15),
    )
    assert pairs(joined) == [("s1", "c1", True)] and late == []
    # The watermark passes c2 and c3: no search still to come could match them.
    joined, _ = steps.run([], [], before=at(15), after=at(30))
    assert pairs(joined) == [(None, "c2", False), (None, "c3", False)]
    c2 = next(r for r in joined if r["click_event_id"] == "c2")
    assert c2["query_id"] is None and c2["product_id"] == "p-1" and c2["hour"] == local(at(0))
    # c1 matched: no unmatched row when it expires; s2's window closes at minute 65.
    joined, _ = steps.run([], [], before=at(30), after=at(66))
    assert pairs(joined) == [("s2", None, False)]
    assert steps.buffer == []


def test_a_right_join_keeps_unmatched_clicks_and_sends_keyless_searches_to_the_late_table(spark):
    steps = Steps(spark, replace(SEARCH_CLICKS, how="right"))
    joined, late = steps.run([search("s1", 0, query="q1"), search("s0", 1, query=None)],
                             [click("c1", 40, query="q1"), click("c2", 50, query="q2")],
                             before=None, after=at(45))
    assert pairs(joined) == [("s1", "c1", True)]
    assert [(r["event_id"], r["reason"]) for r in late] == [("s0", "null_key")]
    # s1 closes without an unmatched row (a right join); c2 expires unmatched; a search for c2
    # that comes now is late (the watermark passed c2), as its click's row says.
    joined, late = steps.run([search("s2", 44, query="q2")], [], before=at(45), after=at(200))
    assert pairs(joined) == [(None, "c2", False)]
    assert [(r["event_id"], r["reason"]) for r in late] == [("s2", "behind_watermark")]
    assert steps.buffer == []


KEYS = [("s1", "q1"), ("s1", "q2"), ("s2", "q1")]
event = st.tuples(st.sampled_from(KEYS), st.integers(0, 180))


@pytest.mark.parametrize("how", ["left", "right", "full"])
@settings(max_examples=5, deadline=None)
@given(
    searches=st.lists(event, min_size=1, max_size=5),
    clicks=st.lists(event, max_size=6),
    order=st.randoms(use_true_random=False),
    cuts=st.lists(st.integers(0, 14), max_size=2),
    copies=st.lists(st.integers(0, 10), max_size=2),
)
def test_incremental_equals_a_batch_outer_join(spark, how, searches, clicks, order, cuts, copies):
    """Any arrival order, batch split and duplicate deliveries give the batch join's rows (left,
    right or full outer), with a watermark that never makes a record late (the least time still
    to arrive)."""
    events = [("s", f"s{i}", k, m) for i, (k, m) in enumerate(searches)]
    events += [("c", f"c{i}", k, m) for i, (k, m) in enumerate(clicks)]
    arrivals = events + [events[i % len(events)] for i in copies]
    order.shuffle(arrivals)
    bounds = sorted({min(c, len(arrivals)) for c in cuts} | {0, len(arrivals)})
    batches = [arrivals[a:b] for a, b in zip(bounds, bounds[1:])]

    steps, joined, before = Steps(spark, replace(SEARCH_CLICKS, how=how)), [], None
    for n, part in enumerate(batches):
        rest = [m for later in batches[n + 1:] for (_, _, _, m) in later]
        after = at(min(rest)) if rest else at(1000)
        rows, late = steps.run(
            [search(e, m, query=q, session=s) for kind, e, (s, q), m in part if kind == "s"],
            [click(e, m, query=q, session=s) for kind, e, (s, q), m in part if kind == "c"],
            before=before, after=after,
        )
        assert late == []
        joined += rows
        before = after
    if not batches:
        steps.run([], [], before=None, after=at(1000))

    pairs_of = [(s, c) for ks, s, key, t in events for kc, c, key2, r in events
                if ks == "s" and kc == "c" and key == key2 and t <= r <= t + 60]
    expected = [(s, c, True) for s, c in pairs_of]
    for kind, event_id, _, _ in events:
        if event_id not in {e for pair in pairs_of for e in pair}:
            if kind == "s" and how in ("left", "full"):
                expected.append((event_id, None, False))
            if kind == "c" and how in ("right", "full"):
                expected.append((None, event_id, False))
    assert pairs(joined) == sorted(expected, key=str)
    assert steps.buffer == []

