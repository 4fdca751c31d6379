"""Right to erasure: a data subject removed from every table, file and copy lakelog holds."""

from lakelog.erasure.erase import Erasure, erase_subject
from lakelog.erasure.record import find_erased, find_subject, recorded
from lakelog.erasure.tables import ErasureError

__all__ = ["Erasure", "ErasureError", "erase_subject", "find_erased", "find_subject", "recorded"]
