"""Great Expectations, imported so that it imports in every kind of process.

GX imports ``pyspark.sql.connect`` if it can, which exits a process pyspark takes for a doctest
run (`lakelog.spark.doctest_guard`); with the guard, GX carries on without Spark Connect where it
is missing, as it does everywhere else. SciPy's statistics and Altair, which GX imports for three
expectations lakelog's suites do not use, are imported when one of those runs
(`lakelog.quality.deferred`).
"""

from __future__ import annotations

from lakelog.quality.deferred import deferred
from lakelog.spark.doctest_guard import not_a_doctest

with not_a_doctest(), deferred("scipy.stats", "altair"):
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
