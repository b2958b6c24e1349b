"""Which SQLite connections a test opened, and whether each was closed again.

A connection left to the garbage collector is a leak: Python 3.13+ reports it as ``ResourceWarning:
unclosed database`` at whatever later moment the collector runs (with ``filterwarnings = error``,
in whichever test happens to run then). These helpers let a test check its own paths directly,
on every Python version.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest


def track_connections(monkeypatch: pytest.MonkeyPatch) -> list[sqlite3.Connection]:
    """From now until the test ends, every ``sqlite3.connect`` (the library's too) appends the new
    connection to the returned list."""
    opened: list[sqlite3.Connection] = []
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db = real(*args, **kwargs)
        opened.append(db)
        return db

    monkeypatch.setattr(sqlite3, "connect", connect)
    return opened


def is_closed(db: sqlite3.Connection) -> bool:
    """Whether ``close()`` was called on ``db``."""
    try:
        db.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False
