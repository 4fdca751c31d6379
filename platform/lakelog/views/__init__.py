"""SQL materialized views, the dbt way: ``*.sql`` models with a config header and refs.

`load_models` parses and checks a folder of models into a `ModelGraph`; `run_model` runs one as
a Spark temporary view, a full recompute into ``views/<name>``, or an incremental merge of the
hours or keys its inputs' changes touched.
"""

from lakelog.views.errors import MissingInputError, ModelError, ModelRunError
from lakelog.views.evaluate import evaluate
from lakelog.views.graph import ModelGraph, load_models
from lakelog.views.materialize import ModelRun, model_rows, run_model
from lakelog.views.models import Model, ModelConfig
from lakelog.views.progress import why_stale

__all__ = [
    "MissingInputError", "Model", "ModelConfig", "ModelError", "ModelGraph", "ModelRun",
    "ModelRunError", "evaluate",
    "load_models", "model_rows", "run_model", "why_stale",
]
