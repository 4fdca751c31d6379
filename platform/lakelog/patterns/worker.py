"""What a pattern runs in Spark's Python workers: the matcher over a shuffle's sorted events.

Spark ships `match_batches` to its workers by reference, so each worker imports this module,
and with it only pyarrow and `lakelog.patterns.matcher` (plain Python): not the engine, pyspark's
DataFrame layer, Delta or Dagster. A new worker (a fresh server's first pattern batch, or one
started after an idle one was stopped) so starts in a fraction of the time the engine's imports
took (`tests/engine/patterns/test_pattern_consumer.py` checks what it imports).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa

from lakelog.patterns.matcher import Compiled, find


def match_batches(pattern: Compiled, watermark_us: int, keys: Sequence[str],
                   batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Events sorted by key then `ORDER` (in a Python worker) → per key, the matched events with
    their match and step, and the events still pending (step -1), each with its columns (so
    nothing is joined back). A key's events may end one batch and go on in the next: the last
    key of a batch waits for the next one."""
    held: pa.Table | None = None  # the last key's events so far
    for batch in batches:
        events = pa.Table.from_batches([batch])
        events = events if held is None else pa.concat_tables([held, events])
        key = list(zip(*(events.column(k).to_pylist() for k in keys)))
        starts = [0, *(i for i in range(1, len(key)) if key[i] != key[i - 1])]
        if len(key) > 0:
            held = events.slice(starts[-1])
            yield from _match_runs(pattern, watermark_us, events.slice(0, starts[-1]),
                                   starts[:-1]).to_batches()
    if held is not None:
        yield from _match_runs(pattern, watermark_us, held, [0]).to_batches()


def _match_runs(pattern: Compiled, watermark_us: int, events: pa.Table,
                starts: list[int]) -> pa.Table:
    """The matcher over each key's events, `starts` being where each key's run begins."""
    ids, times = events.column("_id").to_pylist(), events.column("_t").to_pylist()
    flags = list(zip(*(events.column(c).to_pylist()
                       for c in events.column_names if c.startswith("_f"))))
    taken: list[int] = []
    out_match: list[str | None] = []
    out_step: list[int] = []
    bounds = [*starts, events.num_rows]
    for lo, hi in zip(bounds, bounds[1:]):
        result = find([(times[i], (), flags[i]) for i in range(lo, hi)], pattern,
                      watermark_us=watermark_us)
        for m in result.matches:
            first = ids[lo + m[0][0]]
            for i, step in m:
                taken.append(lo + i)
                out_match.append(first)
                out_step.append(step)
        pending = range(lo + result.keep_from, hi)
        taken.extend(pending)
        out_match.extend([None] * len(pending))
        out_step.extend([-1] * len(pending))
    return (events.take(pa.array(taken, pa.int64()))
            .append_column("_match", pa.array(out_match, pa.string()))
            .append_column("_step", pa.array(out_step, pa.int32())))
