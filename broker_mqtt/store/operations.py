"""The write operations every store handle offers, in one place (Zeek Broker's store API).

:class:`WriteOperations` turns each operation into its command (``broker_mqtt.store.commands``) and
hands it to the handle's ``_write``; handles (master, clone, elected store) decide where it goes.
``expiry`` is seconds from now (None: never); every write resets the key's expiry, as in Broker.
"""

from __future__ import annotations

from typing import Any

from .commands import (
    Append,
    Clear,
    Decrement,
    Erase,
    Increment,
    InsertInto,
    Pop,
    Push,
    Put,
    RemoveFrom,
    WriteCommand,
)

__all__ = ["WriteOperations"]


class WriteOperations:
    """Mixin: the store's write operations over ``_write(command)``."""

    __slots__ = ()

    async def _write(self, command: WriteCommand) -> Any:
        raise NotImplementedError

    async def put(self, key: Any, value: Any, *, expiry: float | None = None) -> None:
        """Set ``key`` to ``value``; ``expiry``: seconds from now (None: never). Resets the expiry."""
        await self._write(Put(key, value, expiry))

    async def erase(self, key: Any) -> None:
        """Remove ``key`` (no error if absent)."""
        await self._write(Erase(key))

    async def clear(self) -> None:
        """Remove every key."""
        await self._write(Clear())

    async def increment(self, key: Any, amount: int | float = 1, *, expiry: float | None = None) -> None:
        """Add ``amount`` (int to int, float to float; absent key: 0); TypeClash otherwise."""
        await self._write(Increment(key, amount, expiry))

    async def decrement(self, key: Any, amount: int | float = 1, *, expiry: float | None = None) -> None:
        """Subtract ``amount`` (absent key: 0); TypeClash otherwise."""
        await self._write(Decrement(key, amount, expiry))

    async def append(self, key: Any, value: str | bytes, *, expiry: float | None = None) -> None:
        """Append str to str or bytes to bytes (absent key: empty)."""
        await self._write(Append(key, value, expiry))

    async def insert_into(self, key: Any, index: Any, value: Any = None, *, expiry: float | None = None) -> None:
        """Add ``index`` to a set, or set ``table[index] = value`` (absent key: set if value is None)."""
        await self._write(InsertInto(key, index, value, expiry))

    async def remove_from(self, key: Any, index: Any, *, expiry: float | None = None) -> None:
        """Remove ``index`` from a set or table; NoSuchKey if ``key`` is absent."""
        await self._write(RemoveFrom(key, index, expiry))

    async def push(self, key: Any, value: Any, *, expiry: float | None = None) -> None:
        """Append ``value`` to a vector (absent key: empty)."""
        await self._write(Push(key, value, expiry))

    async def pop(self, key: Any, *, expiry: float | None = None) -> None:
        """Drop a vector's last element; NoSuchKey if ``key`` is absent."""
        await self._write(Pop(key, expiry))
