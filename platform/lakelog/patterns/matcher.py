"""Matching a pattern over one key's events, in plain Python (no Spark): the rules of
`lakelog.patterns` step by step.

An event is ``(time_us, order, flags)``: `flags[c]` says whether it satisfies condition `c` of
the pattern (steps first, then absences). Events are taken in (time, order) order.

1. **Starts, leftmost first.** A match starts at an event satisfying the first step (no other
   event is kept for later). A start is tried only once its whole window is settled,
   ``start + within < watermark``: every event that could take part is known (a later one
   would be late), and the result is the one a batch computation over all events gives.
2. **Skip till next match.** Each step takes the next event satisfying it; events in between
   that satisfy nothing are skipped. A quantified step is greedy: it takes as many events as
   its maximum allows, then gives them back one by one while the rest of the pattern fails.
3. **Absence.** An absence between two steps fails the match if an event satisfying it lies
   between the last event of the step before and the first event of the step after; a trailing
   absence, if one lies after the last matched event and within the window.
4. **After a match**, matching resumes past its last event (SKIP PAST LAST ROW); after a failed
   start, at the next event.

The events from the first start not yet tried on are kept for the next batch; the others are
decided and dropped, so a key keeps about `within` plus the allowed lateness of its events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Event = tuple[int, tuple, Sequence[bool]]


@dataclass(frozen=True)
class Element:
    """A step of a compiled pattern: its condition, quantifier and the absences before it."""

    condition: int
    low: int
    high: int | None
    absent_before: tuple[int, ...] = ()


@dataclass(frozen=True)
class Compiled:
    steps: tuple[Element, ...]
    trailing: tuple[int, ...]  # absences after the last step
    within_us: int


@dataclass(frozen=True)
class Found:
    matches: list[list[tuple[int, int]]]  # per match: (event index, step) pairs, in order
    keep_from: int  # the index of the first event still needed (len(events): none)


def find(events: Sequence[Event], pattern: Compiled, *, watermark_us: int | None) -> Found:
    """The matches among `events` (sorted) whose windows the watermark has passed (all of them
    when `watermark_us` is None: the batch computation over a complete history)."""
    matches, i = [], 0
    while i < len(events):
        if not events[i][2][pattern.steps[0].condition]:
            i += 1  # cannot start a match, and a later start never looks back at it
            continue
        horizon = events[i][0] + pattern.within_us
        if watermark_us is not None and horizon >= watermark_us:
            break
        taken = _match_at(events, pattern, i, horizon)
        if taken:
            matches.append(taken)
            i = taken[-1][0] + 1
        else:
            i += 1
    return Found(matches, i)


def _match_at(events: Sequence[Event], p: Compiled, start: int,
              horizon: int) -> list[tuple[int, int]] | None:
    if not events[start][2][p.steps[0].condition]:
        return None

    def absent(absences: tuple[int, ...], lo: int, hi: int) -> bool:
        """No event strictly between indices lo and hi satisfies any of `absences`."""
        return not any(events[k][2][a] for k in range(lo + 1, hi) for a in absences)

    def rest(j: int, prev: int) -> list[tuple[int, int]] | None:
        if j == len(p.steps):
            end = prev + 1
            while end < len(events) and events[end][0] <= horizon:
                end += 1
            return [] if absent(p.trailing, prev, end) else None
        step = p.steps[j]
        chain: list[int] = []
        k = start if j == 0 else prev + 1
        while (step.high is None or len(chain) < step.high) and k < len(events):
            if events[k][0] > horizon:
                break
            if events[k][2][step.condition]:
                if not chain and not absent(step.absent_before, prev, k):
                    break  # an absence lies before every later candidate too
                chain.append(k)
            elif j == 0 and not chain:
                break
            k += 1
        for n in range(len(chain), step.low - 1, -1):
            last = chain[n - 1] if n else prev
            after = rest(j + 1, last)
            if after is not None:
                return [(e, j) for e in chain[:n]] + after
        return None

    return rest(0, start - 1)
