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
EXPECTATIONS = "expectations"

#: The checks Great Expectations evaluates: the tables' and the models' (the audits, such as a
#: replay compared with the live table, are lakelog's own comparisons).
GX_CHECKS = frozenset({TOPIC_CHECK, COMPACTED_CHECK, HISTORY_CHECK, VALUE_RANGES,
                       ROW_COUNT_CHANGE, UNIQUE_KEY, EXPECTATIONS})

#: The checks that validate their whole table in every run, whether records came or not.
WHOLE_TABLE_CHECKS = frozenset({COMPACTED_CHECK, HISTORY_CHECK})


def model_checks(model: Model) -> tuple[str, ...]:
    """The warning checks `model` declares: value ranges and row-count change when configured,
    the uniqueness of the unique_key of an incremental model, and its own `expect` list."""
    config = model.config
    names = []
    if config.ranges:
        names.append(VALUE_RANGES)
    if config.row_count_change is not None:
        names.append(ROW_COUNT_CHANGE)
    if config.unique_key:
        names.append(UNIQUE_KEY)
    if config.expect:
        names.append(EXPECTATIONS)
    return tuple(names)
