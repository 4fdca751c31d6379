"""Data quality with Great Expectations 1.x, run on Spark DataFrames, results as plain data.

`lakelog.quality.suites` declares the suites of lakelog's tables and models,
`lakelog.quality.validate` runs them, `lakelog.quality.outcomes` holds what they found, and
`lakelog.quality.gx` imports GX so that it imports in any process. This module imports none of
them: Great Expectations takes seconds to import, which code that only
needs the check names (such as loading Dagster definitions) should not pay.
"""
