"""Great Expectations, imported so that it imports in every kind of process.

GX imports ``pyspark.sql.connect`` if it can. That import ends the process with ``sys.exit(0)``
when the ``__main__`` module looks uninitialised, which pyspark takes for a doctest run: in
``python -c`` and in pytest-xdist workers. While ``sys.ps1`` is set pyspark takes the process for
an interactive one instead, a missing Spark Connect dependency is an ImportError, and GX carries
on without Spark Connect, as it does everywhere else.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def _not_a_doctest() -> Iterator[None]:
    added = not hasattr(sys, "ps1")
    if added:
        sys.ps1 = ">>> "
    try:
        yield
    finally:
        if added:
            del sys.ps1


with _not_a_doctest():
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )
    from great_expectations.expectations.expectation import Expectation

__all__ = [
    "DataContextConfig", "Expectation", "InMemoryStoreBackendDefaults", "ProgressBarsConfig",
    "gx", "gxe",
]
