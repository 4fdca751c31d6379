"""The names of the checks lakelog declares, known without importing Great Expectations."""

from __future__ import annotations

from lakelog.views.models import Model

#: Blocking checks of lakelog's own tables, one per table.
TOPIC_CHECK = "log_integrity"
COMPACTED_CHECK = "primary_key_unique"
HISTORY_CHECK = "history_integrity"

#: Warning checks of a model, each declared in its config header (or implied by it).
VALUE_RANGES = "value_ranges"
ROW_COUNT_CHANGE = "row_count_change"
UNIQUE_KEY = "unique_key"


def model_checks(model: Model) -> tuple[str, ...]:
    """The warning checks `model` declares: value ranges and row-count change when configured,
    and the uniqueness of the unique_key of an incremental model."""
    config = model.config
    names = []
    if config.ranges:
        names.append(VALUE_RANGES)
    if config.row_count_change is not None:
        names.append(ROW_COUNT_CHANGE)
    if config.unique_key:
        names.append(UNIQUE_KEY)
    return tuple(names)
