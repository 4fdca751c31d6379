"""Search on streams (DDIA ch. 11): stored queries matched against the records of a topic as they
arrive, the way a percolator does (`Percolator`)."""

from lakelog.search.percolator import Condition, Percolator, matches

__all__ = ["Condition", "Percolator", "matches"]
