"""Errors of SQL models: a bad definition (found at load) and a failed run (found by Spark)."""

from __future__ import annotations

from lakelog.errors import ConfigError, LakelogError


class ModelError(ConfigError):
    """A model file cannot be loaded: bad config, unknown ref, cycle, duplicate or bad name.

    The message starts with the file, so the user knows which model to fix.
    """


class ModelRunError(LakelogError):
    """Spark could not run a model's SQL; the message names the file and gives Spark's message."""


class MissingInputError(ModelRunError):
    """A table the model reads does not exist yet: nothing has written it (`paths`)."""

    def __init__(self, message: str, paths: tuple[str, ...]) -> None:
        super().__init__(message)
        self.paths = paths
