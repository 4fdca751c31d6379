"""A process's ``/proc/<pid>/stat`` (Linux), read one way for every caller."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name — index 0 is field 3 of
    proc(5), the state (``Z``: a zombie); 11 and 12 user and system CPU ticks; 19 the start time
    in ticks since boot — or None when there is no such process (or no /proc). The command name
    is cut at its last ``)``: it may itself hold spaces and parentheses."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()
