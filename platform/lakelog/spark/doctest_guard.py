"""Importing ``pyspark.sql.connect`` in every kind of process.

That import ends the process with ``sys.exit(0)`` when the ``__main__`` module looks
uninitialised, which pyspark takes for a doctest run: in ``python -c`` and in pytest-xdist
workers. While ``sys.ps1`` is set pyspark takes the process for an interactive one instead, and a
missing Spark Connect dependency is an ImportError. Great Expectations imports it if it can
(`lakelog.quality.gx`), and the prefork server preloads it (`lakelog.assets.prefork`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def not_a_doctest() -> Iterator[None]:
    """Imports inside are not taken by pyspark for a doctest run."""
    added = not hasattr(sys, "ps1")
    if added:
        sys.ps1 = ">>> "
    try:
        yield
    finally:
        if added:
            del sys.ps1
