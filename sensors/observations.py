"""Consumer lag as asset observations, reported by the pipeline sensor between runs.

A materialization reports lag only when a run ends; operators also want to see it grow while
records wait. The sensor reports it on every consumer output, but only when a value changed
since its last tick (the last values live in its cursor): an idle pipeline adds no rows to the
event log every few seconds. `lag_seconds` is whole seconds, so a lagging consumer is reported
once per tick until it has caught up, and a caught-up one once.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import dagster as dg

from lakelog.assets.naming import output_key
from lakelog.consumers import Consumer
from lakelog.consumers.backlog import Backlog
from lakelog.consumers.watermarks import from_us

Values = dict[str, int]


def lag_values(backlog: Backlog, state: Mapping[str, Any], now: datetime) -> Values:
    """What is reported of a consumer: records and seconds behind, and its watermark if it
    keeps one (windows and joins)."""
    values = {"lag_records": backlog.records, "lag_seconds": round(backlog.seconds(now))}
    if isinstance(state.get("watermark_us"), int):
        values["watermark_us"] = state["watermark_us"]
    return values


def observations(
    consumers: Mapping[str, Consumer],
    values: Mapping[str, Values],
    last: Mapping[str, Values],
) -> list[dg.AssetObservation]:
    """One observation per output of each consumer whose values differ from `last`."""
    events = []
    for name, now_values in sorted(values.items()):
        if last.get(name) == now_values:
            continue
        metadata: dict[str, Any] = {
            "lag_records": now_values["lag_records"],
            "lag_seconds": float(now_values["lag_seconds"]),
        }
        if "watermark_us" in now_values:
            metadata["watermark"] = dg.MetadataValue.timestamp(from_us(now_values["watermark_us"]))
        events += [dg.AssetObservation(asset_key=output_key(o), metadata=metadata)
                   for o in consumers[name].outputs]
    return events
