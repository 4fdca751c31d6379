"""Run keys: short, stable digests of the work a sensor requests."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest(work: Any) -> str:
    """A 16-hex-digit digest of `work` (JSON-serializable), independent of dict order."""
    text = json.dumps(work, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
