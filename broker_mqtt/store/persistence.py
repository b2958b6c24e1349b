"""Where a :class:`~.versioned.VersionedState` writes its committed batches: the interface
(:class:`~.versioned_sqlite.StateFile` is the SQLite file that implements it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

__all__ = ["Persistence"]


class Persistence(Protocol):
    """Where a state's committed batches go (:class:`~.versioned_sqlite.StateFile`: an SQLite file)."""

    def write(self, header: dict[str, Any], rows: Iterable[tuple[bytes, bytes]], gone: list[tuple[bytes]],
              *, replace_all: bool, from_staged: bool = False) -> None:
        """Durably, atomically: drop the ``gone`` keys (or every row, ``replace_all``; or take the
        staging area's rows in place of every row, ``from_staged``), store ``rows`` (packed key,
        packed version) and ``header``. Raises BackendError (nothing written)."""
        ...

    def stage(self, rows: Iterable[tuple[bytes, bytes]], gone: list[tuple[bytes]], *, fresh: bool) -> None:
        """In one transaction, to the staging area (a snapshot as it arrives; dropped if the process
        dies before ``write(..., from_staged=True)`` takes it): (``fresh``: empty it first) drop the
        ``gone`` keys, store ``rows``. Raises BackendError (nothing staged)."""
        ...

    def close(self) -> None:
        """Release it; idempotent."""
        ...
