"""The capture checkpoint: a small JSON file per source server, replaced atomically.

``<root>/_checkpoints/_capture/<server>.json`` records whether the snapshot is landed (and which
of its staging folders still wait to be published), the last landed position, and the end of the
batch being landed (write-ahead, so a retry lands exactly the same changes). A lock file next to
it keeps two captures of one server from running at once.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from lakelog.cdc.errors import CaptureBusyError
from lakelog.errors import ConfigError

FOLDER = os.path.join("_checkpoints", "_capture")
FORMAT = 1


@dataclass(frozen=True)
class CaptureState:
    server_name: str
    connector: str
    tables: tuple[str, ...]  # the captured tables: another set needs a new snapshot
    snapshot_position: int  # the position of the landed snapshot
    position: int  # every change up to here is landed
    staging: tuple[str, ...] = ()  # hidden snapshot folders (relative to root) not yet published
    pending: int | None = None  # the end of the batch being landed, or None between batches
    updated_at: str = ""


def checkpoint_path(root: str, server_name: str) -> str:
    return os.path.join(root, FOLDER, f"{server_name}.json")


def load(root: str, server_name: str, connector: str) -> CaptureState | None:
    """The server's capture state; None before its first snapshot is landed."""
    path = checkpoint_path(root, server_name)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"capture state {path} is unreadable ({e}); remove it to take a new snapshot"
        ) from e
    if data.get("format") != FORMAT:
        raise ConfigError(f"capture state {path} has unknown format {data.get('format')!r}")
    if data["connector"] != connector:
        raise ConfigError(
            f"capture state {path} belongs to a {data['connector']} source, not {connector}: "
            "give each source its own server name"
        )
    data.pop("format")
    data["staging"] = tuple(data["staging"])
    data["tables"] = tuple(data["tables"])
    return CaptureState(**data)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, text: str) -> None:
    """Write `text` to a hidden temporary file, fsync it, rename it to `path`, fsync the folder."""
    folder, name = os.path.split(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(folder)


def save(root: str, state: CaptureState) -> None:
    data = {"format": FORMAT, **asdict(state)}
    data["staging"], data["tables"] = list(state.staging), list(state.tables)
    write_atomic(checkpoint_path(root, state.server_name), json.dumps(data, indent=1) + "\n")


@contextmanager
def locked(root: str, server_name: str) -> Iterator[None]:
    """Hold the server's capture lock (released when the process dies, so never stale)."""
    folder = os.path.join(root, FOLDER)
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, f"{server_name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise CaptureBusyError(
                f"another capture of {server_name} is running under {root}"
            ) from e
        yield
    finally:
        os.close(fd)
