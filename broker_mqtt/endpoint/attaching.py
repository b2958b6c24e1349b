"""Attaching a store or a queue to an endpoint: ``await`` it, or use it as an async context manager.

``attach_master``, ``attach_clone``, ``attach_store`` and ``attach_queue`` live in the packages built
on the endpoint (the endpoint knows nothing of them) and return an :class:`Attaching`:

* ``store = await attach_master(ep, "config")``: the handle lives until ``await store.close()`` or
  until the endpoint closes;
* ``async with attach_master(ep, "config") as store:``: the handle is closed when the block ends,
  also when it ends by an exception or a cancellation.

Attaching starts when it is first awaited or entered, not when the function is called.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

__all__ = ["Attaching", "Closeable", "attaching"]


class Closeable(Protocol):
    async def close(self) -> None: ...


H = TypeVar("H", bound=Closeable)
P = ParamSpec("P")


class Attaching(Generic[H]):
    """A handle being attached: awaitable (gives the handle) and an async context manager (gives the
    handle, closes it on exit). Use it once, in one of the two ways."""

    __slots__ = ("_open", "_handle")

    def __init__(self, open_handle: Callable[[], Coroutine[Any, Any, H]]) -> None:
        self._open = open_handle
        self._handle: H | None = None

    def __await__(self) -> Generator[Any, None, H]:
        return self._open().__await__()

    async def __aenter__(self) -> H:
        self._handle = await self._open()
        return self._handle

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            await handle.close()


def attaching(fn: Callable[P, Coroutine[Any, Any, H]]) -> Callable[P, Attaching[H]]:
    """Make ``async def attach_x(ep, ...) -> Handle`` return an :class:`Attaching` instead."""

    @functools.wraps(fn)
    def attach(*args: P.args, **kwargs: P.kwargs) -> Attaching[H]:
        return Attaching(lambda: fn(*args, **kwargs))

    return attach
