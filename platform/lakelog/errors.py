"""Errors a user can act on. The CLI prints their message as one line; anything else is a bug."""


class LakelogError(Exception):
    """Base class: a clear, one-line explanation of what went wrong and what to do."""


class ConfigError(LakelogError):
    """A declaration or option is invalid (bad topic name, unknown mode, ...)."""


class TableNotFoundError(LakelogError):
    """A Delta table that should exist does not."""


class UnknownTopicError(LakelogError):
    """The named topic is not declared or has never been written."""


class UnknownConsumerError(LakelogError):
    """The named consumer is not declared."""


class SchemaMismatchError(LakelogError):
    """A DataFrame does not match the schema of the table it is written to."""


class ConcurrentWriteError(LakelogError):
    """Another writer committed a conflicting transaction first; nothing of ours was committed."""


class FencedError(ConcurrentWriteError):
    """A consumer group member's log partition moved to another member in a newer generation:
    its batch there was not committed (the new owner finishes it)."""

    def __init__(self, message: str, *, partition: int | None = None) -> None:
        super().__init__(message)
        self.partition = partition


class ConsumerBusyError(LakelogError):
    """A microbatch of the consumer is in progress, so its offsets cannot be changed now."""


class ChangesUnavailableError(LakelogError):
    """A table's change feed for the asked versions is gone (files vacuumed, log expired)."""


class UnsafeReplayError(LakelogError):
    """Replaying records into a consumer's outputs would count them twice (`lakelog.consumers.resets`)."""


class DefinitionChangedError(ConfigError):
    """A consumer is declared otherwise than when its outputs and state were written
    (`lakelog.consumers.definitions`)."""
