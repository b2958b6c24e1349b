"""CPU time of another process, read from Linux's ``/proc`` (the benchmarks' per-process CPU figures)."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far. Raises OSError if there is no
    ``/proc/<pid>`` (the process is gone, or this is not Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # (the name may hold spaces)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
