"""Joins of streams and tables, each a consumer writing ``streams/<name>`` (DESIGN data model).

- `WindowJoin` — stream–stream window join (left, right or full outer), with a watermark,
  bounded state in ``_state/joins/<name>/`` and a late table;
- `EnrichJoin` — stream–table join: records with the current row of a compacted table;
- `AsOfJoin` — versioned join: records with the row of a history table valid at their time;
- `TableJoin` — per-key totals of a fact stream joined with a table, kept up to date from both
  sides' change streams;
- `ChangelogJoin` — table–table join of two changelog-backed tables on any columns (inner or
  outer), kept up to date from both sides' change streams.
"""

from lakelog.joins.as_of import AsOfJoin, join_as_of
from lakelog.joins.changelog_join import ChangelogJoin
from lakelog.joins.enrich import EnrichJoin, enrich
from lakelog.joins.late import REASONS, Reason
from lakelog.joins.lookup import Lookup
from lakelog.joins.matching import Matches, match_batch
from lakelog.joins.side import Side
from lakelog.joins.table_join import TableJoin
from lakelog.joins.window_join import WindowJoin

__all__ = [
    "REASONS",
    "AsOfJoin",
    "ChangelogJoin",
    "EnrichJoin",
    "Lookup",
    "Matches",
    "Reason",
    "Side",
    "TableJoin",
    "WindowJoin",
    "enrich",
    "join_as_of",
    "match_batch",
]
