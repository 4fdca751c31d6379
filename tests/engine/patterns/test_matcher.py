"""The pattern matcher on one key's events, in plain Python: quantifiers, absences, the time
bound, skipping past a match, and what the watermark decides."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lakelog.errors import ConfigError
from lakelog.patterns import Absent, Pattern, Step, quantifier
from lakelog.patterns.matcher import Compiled, Element, find

MIN = 60_000_000  # a minute in microseconds


def events(*spec: str) -> list:
    """Events one minute apart; each letter a condition it satisfies (a, b, c: 0, 1, 2)."""
    return [(n * MIN, (), [c in letters for c in "abc"]) for n, letters in enumerate(spec)]


def pattern(*steps: tuple, trailing=(), within=60) -> Compiled:
    """`steps`: (condition, low, high, absences before it)."""
    return Compiled(tuple(Element(c, lo, hi, tuple(ab)) for c, lo, hi, ab in steps),
                    tuple(trailing), within * MIN)


def spans(found) -> list[list[tuple[int, int]]]:
    return found.matches


def test_greedy_quantifiers_give_back_what_the_rest_needs():
    # a b+ b: the + takes every b but one.
    p = pattern((0, 1, 1, ()), (1, 1, None, ()), (1, 1, 1, ()))
    assert spans(find(events("a", "b", "b", "b"), p, watermark_us=None)) == [
        [(0, 0), (1, 1), (2, 1), (3, 2)]]
    # a b{2,3} c with a b too many: the fourth b is skipped (it is not a c); matching resumes
    # past the match's last event.
    p = pattern((0, 1, 1, ()), (1, 2, 3, ()), (2, 1, 1, ()))
    found = find(events("a", "b", "b", "b", "b", "c", "a", "b", "b", "c"), p, watermark_us=None)
    assert [[i for i, _ in m] for m in found.matches] == [[0, 1, 2, 3, 5], [6, 7, 8, 9]]
    # a b{2,3} c with one b: no match.
    assert find(events("a", "b", "c"), p, watermark_us=None).matches == []


def test_events_that_satisfy_nothing_are_skipped_but_an_absence_fails_the_match():
    # a, no c, then b: "a . b" matches; "a c b" does not.
    p = pattern((0, 1, 1, ()), (1, 1, 1, (2,)))
    assert [[i for i, _ in m] for m in find(events("a", "", "b"), p, watermark_us=None).matches] \
        == [[0, 2]]
    assert find(events("a", "c", "b"), p, watermark_us=None).matches == []


def test_a_trailing_absence_looks_to_the_end_of_the_window():
    p = pattern((0, 1, None, ()), trailing=(2,), within=30)
    # a at 0 and 1, c at 31: outside a's 30 minutes -> a match of both a's.
    ev = events("a", "a") + [(31 * MIN, (), [False, False, True])]
    assert [[i for i, _ in m] for m in find(ev, p, watermark_us=None).matches] == [[0, 1]]
    # c at 20: inside, no match from either a (the second a's window holds it too).
    ev = events("a", "a") + [(20 * MIN, (), [False, False, True])]
    assert find(ev, p, watermark_us=None).matches == []


def test_within_bounds_a_match_from_its_first_event():
    p = pattern((0, 1, 1, ()), (1, 1, 1, ()), within=2)
    ev = [(0, (), [True, False, False]), (3 * MIN, (), [True, False, False]),
          (4 * MIN, (), [False, True, False])]
    assert [[i for i, _ in m] for m in find(ev, p, watermark_us=None).matches] == [[1, 2]]


def test_only_starts_whose_window_the_watermark_passed_are_decided():
    p = pattern((0, 1, 1, ()), (1, 1, 1, ()), within=10)
    ev = events("a", "", "b", "a")
    found = find(ev, p, watermark_us=11 * MIN)  # the first a's window (to minute 10) is decided
    assert [[i for i, _ in m] for m in found.matches] == [[0, 2]] and found.keep_from == 3
    found = find(ev, p, watermark_us=10 * MIN)  # not yet: everything is kept
    assert found.matches == [] and found.keep_from == 0


def test_quantifier_syntax_and_declaration_errors():
    assert [quantifier(q) for q in (None, "+", "*", "?", "{2}", "{2,}", "{1,3}")] == [
        (1, 1), (1, None), (0, None), (0, 1), (2, 2), (2, None), (1, 3)]
    for bad in ("++", "{3,1}", "{0}", "x"):
        with pytest.raises(ConfigError, match="quantifier"):
            quantifier(bad)
    from lakelog.demo.shop import CART_EVENTS, ORDERS
    from lakelog.consumers.watermarks import Watermark

    def make(*elements, **kw):
        return Pattern("p", (CART_EVENTS, ORDERS), ("cart_id",), elements,
                       kw.get("within", timedelta(minutes=5)), Watermark())

    with pytest.raises(ConfigError, match="must start with a step"):
        make(Absent("o", "orders"), Step("a", "cart_events"))
    with pytest.raises(ConfigError, match="must start with a step"):
        make(Step("a", "cart_events", times="*"))
    with pytest.raises(ConfigError, match="absence o must stand between steps"):
        make(Step("a", "cart_events"), Absent("o", "orders"), Step("b", "cart_events", times="?"))
    with pytest.raises(ConfigError, match="not among its topics"):
        make(Step("a", "clicks"))
    with pytest.raises(ConfigError, match="within must be > 0"):
        make(Step("a", "cart_events"), within=timedelta(0))
    with pytest.raises(ConfigError, match="key column 'action'"):
        Pattern("p", (CART_EVENTS, ORDERS), ("action",), (Step("a", "cart_events"),),
                timedelta(minutes=1), Watermark())
