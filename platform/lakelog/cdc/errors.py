"""Errors of change data capture that `lakelog.errors` has no class for."""

from __future__ import annotations

from lakelog.errors import LakelogError


class SourceUnavailableError(LakelogError):
    """The source database cannot be reached (wrong DSN or path, server down, access refused)."""


class CaptureError(LakelogError):
    """The change stream cannot be captured as it is (a TRUNCATE, a lost slot, a schema change)."""


class CaptureBusyError(LakelogError):
    """Another capture of the same source is running; this one wrote nothing."""
