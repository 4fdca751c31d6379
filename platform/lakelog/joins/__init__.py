"""Joins of streams and tables, each a consumer writing ``streams/<name>`` (DESIGN data model).

- `WindowJoin` — stream–stream window join (left outer), with a watermark, bounded state in
  ``_state/joins/<name>/`` and a late table;
- `EnrichJoin` — stream–table join: records with the current row of a compacted table;
- `AsOfJoin` — versioned join: records with the row of a history table valid at their time;
- `TableJoin` — table–table join kept up to date from both sides' change streams.
"""

from lakelog.joins.as_of import AsOfJoin, join_as_of
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
