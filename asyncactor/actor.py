"""The anyio layer: runs an :class:`~asyncactor.protocol.ActorCore` over a transport.

Theory of operation
-------------------
:class:`Actor` is an async context manager owning a task group with three tasks: the *reader*
feeds each message from ``transport.monitor()`` to the core, the *timer* sleeps until the core's
``next_deadline`` (woken early when that moves closer) and calls ``core.timer``, the *sender*
drains an unbounded queue into ``transport.send``; a fourth follows ``transport.links()`` when the
transport has it (``core.offline``/``core.online`` as its connection drops and returns).  After
every core call the layer flushes the core's messages to the sender and its events into an
:class:`~asyncactor.queue.EventQueue`, so the protocol never waits for the application
(slow-consumer policy: docs/asyncactor.md §6).  Only anyio APIs are used: it runs on asyncio and trio.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .config import Config
from .events import ActorEvent
from .policy import default_has_priority, default_ping_delay
from .protocol import ActorCore, CoreStats, Phase
from .queue import EventQueue, QueueStats
from .transport import Transport

__all__ = ["Actor"]


class Actor:
    """One participant.  Usage::

        async with Actor(transport, name="gw-1", cfg={"cycle": 5, "gap": 1}) as actor:
            await actor.set_value(42)
            async for event in actor:
                ...

    Keyword options: ``cfg`` (see :class:`~asyncactor.Config`), ``value``, ``enabled``,
    ``sticky`` (keep the tag while alive), ``raw`` (report :class:`RawMsgEvent`), ``rng``,
    ``has_priority``/``ping_delay`` (policies; subclasses may override the methods instead),
    ``allow_short_cycle`` (accept ``cycle < 3 * gap``), ``raw_limit``.

    Leaving the context cancels the tasks; no message is sent on exit (use :meth:`handoff`
    first to pass the tag at once).  Iteration ends when the context is left.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        name: str,
        cfg: Mapping[str, Any] | Config | None = None,
        value: Any = None,
        enabled: bool = True,
        sticky: bool = False,
        raw: bool = False,
        rng: random.Random | None = None,
        has_priority: Any = None,
        ping_delay: Any = None,
        allow_short_cycle: bool = False,
        raw_limit: int = 1000,
    ) -> None:
        conf = (
            cfg if isinstance(cfg, Config) else Config.from_mapping(cfg, allow_short_cycle=allow_short_cycle)
        )
        if isinstance(cfg, Config):
            conf.check(allow_short_cycle=allow_short_cycle)
        self._allow_short_cycle = allow_short_cycle
        self._transport = transport
        self._user_priority = has_priority
        self._user_delay = ping_delay
        self._core = ActorCore(
            name, config=conf, value=value, enabled=enabled, sticky=sticky, raw=raw, rng=rng,
            has_priority=self.has_priority, ping_delay=self.ping_delay,
        )  # fmt: skip
        self._queue = EventQueue(raw_limit=raw_limit)
        self._has_event = anyio.Event()
        self._poke = anyio.Event()
        self._sleep_until = math.inf
        self._tg: TaskGroup | None = None
        self._closed = False
        self._out_send: MemoryObjectSendStream[dict[str, Any]]
        self._out_recv: MemoryObjectReceiveStream[dict[str, Any]]

    # ---- overridable policies ----
    def has_priority(self, his_node: str, his_value: Any, my_node: str, my_value: Any) -> bool:
        """True if ``his`` ping beats ``mine`` in a collision.  Must be deterministic and total."""
        fn = self._user_priority or default_has_priority
        return bool(fn(his_node, his_value, my_node, my_value))

    def ping_delay(
        self, pos: int | None, length: int, max_length: int, n_hosts: int, rng: random.Random
    ) -> float:
        """Delay factor (0..2, times ``gap``, after ``cycle``) before we ping; see policy."""
        fn = self._user_delay or default_ping_delay
        return float(fn(pos, length, max_length, n_hosts, rng))

    # ---- lifecycle ----
    async def __aenter__(self) -> Actor:
        self._out_send, self._out_recv = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            await self._tg.start(self._reader)
            links = getattr(self._transport, "links", None)
            if links is not None:
                await self._tg.start(self._links, links)
            self._tg.start_soon(self._sender)
            self._tg.start_soon(self._timer)
            self._core.start(anyio.current_time())
            self._flush()
        except BaseException:
            self._tg.cancel_scope.cancel()
            self._out_send.close()
            self._out_recv.close()
            await self._tg.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        self._closed = True
        self._has_event.set()
        self._tg.cancel_scope.cancel()
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._out_send.close()
            self._out_recv.close()

    # ---- events ----
    def __aiter__(self) -> Actor:
        return self

    async def __anext__(self) -> ActorEvent:
        while True:
            if len(self._queue):
                return self._queue.get()
            if self._closed:
                raise StopAsyncIteration
            await self._has_event.wait()
            self._has_event = anyio.Event()

    def get_event_nowait(self) -> ActorEvent:
        """The next waiting event; raises ``anyio.WouldBlock`` if there is none."""
        if not len(self._queue):
            raise anyio.WouldBlock
        return self._queue.get()

    # ---- controls ----
    async def set_value(self, value: Any) -> None:
        """Set our value (used from our next ping on).  Never blocks for long."""
        self._core.set_value(value, anyio.current_time())
        self._flush()

    async def enable(self) -> None:
        self._core.enable(anyio.current_time())
        self._flush()

    async def disable(self) -> None:
        """Stop pinging; a running tag ends normally; events keep coming."""
        self._core.disable(anyio.current_time())
        self._flush()

    async def handoff(self) -> bool:
        """Pass the tag on at once (UntagEvent now, release message out) and stop pinging.
        Call before leaving the context on a graceful shutdown.  Returns True if we were "it"."""
        done = self._core.handoff(anyio.current_time())
        self._flush()
        await anyio.lowlevel.checkpoint()  # let the sender run
        return done

    async def offline(self) -> None:
        """Tell the actor that its transport cannot reach the group (the connection dropped): it
        bids no more, and gives up a bid in flight, until :meth:`online`; a held tag runs out
        normally (see ``ActorCore.offline``).  Called for you when the transport has ``links()``
        (docs/asyncactor.md §10)."""
        self._core.offline(anyio.current_time())
        self._flush()

    async def online(self) -> None:
        """Tell the actor that its transport reaches the group again: it bids only after the
        holder had time to ping (see ``ActorCore.online``)."""
        self._core.online(anyio.current_time())
        self._flush()

    async def holder_gone(self, node: str) -> bool:
        """Tell the actor that ``node`` is gone (e.g. its endpoint's MQTT last will arrived): if it
        holds the current slot we bid at once, in chain order, as after a :meth:`handoff`, so a
        dead holder is replaced in ~1.5·gap instead of up to ``cycle + gap``.  Returns True if
        that moved our bid; harmless if the report is wrong (see ``ActorCore.holder_gone``)."""
        moved = self._core.holder_gone(node, anyio.current_time())
        self._flush()
        return moved

    @property
    def current(self) -> str | None:
        """The node holding the current slot as this node sees it (None before the first ping)."""
        return self._core.current

    async def update_config(self, changes: Mapping[str, Any]) -> Config:
        """Change the group configuration (version bump, broadcast).  ``ValueError`` if bad."""
        conf = self._core.update_config(
            changes, anyio.current_time(), allow_short_cycle=self._allow_short_cycle
        )
        self._flush()
        return conf

    # ---- views ----
    @property
    def name(self) -> str:
        return self._core.name

    @property
    def value(self) -> Any:
        return self._core.value

    @property
    def enabled(self) -> bool:
        return self._core.enabled

    @property
    def config(self) -> Config:
        return self._core.config

    @property
    def is_it(self) -> bool:
        return self._core.phase is Phase.TAGGED

    @property
    def history(self) -> tuple[str, ...]:
        """Recent pingers, newest first."""
        return self._core.history

    @property
    def core(self) -> ActorCore:
        return self._core

    def statistics(self) -> tuple[CoreStats, QueueStats]:
        return self._core.stats, self._queue.stats

    # ---- tasks ----
    def _flush(self) -> None:
        core = self._core
        for msg in core.to_send():
            self._out_send.send_nowait(msg)
        events = core.events()
        if events:
            for ev in events:
                self._queue.put(ev)
            self._has_event.set()
        deadline = core.next_deadline
        if deadline is not None and deadline < self._sleep_until:
            self._poke.set()

    async def _reader(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._transport.monitor() as msgs:
            task_status.started()
            async for msg in msgs:
                self._core.receive(msg, anyio.current_time())
                self._flush()

    async def _links(self, links: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with links() as states:
            started = False
            async for up in states:
                if up:
                    self._core.online(anyio.current_time())
                else:
                    self._core.offline(anyio.current_time())
                self._flush()
                if not started:  # the current state is known before we take part
                    started = True
                    task_status.started()

    async def _sender(self) -> None:
        async for msg in self._out_recv:
            await self._transport.send(msg)

    async def _timer(self) -> None:
        core = self._core
        while True:
            deadline = core.next_deadline
            self._sleep_until = math.inf if deadline is None else deadline
            now = anyio.current_time()
            if deadline is not None and deadline <= now:
                core.timer(now)
                self._flush()
                continue
            if self._poke.is_set():
                self._poke = anyio.Event()
                continue
            with anyio.move_on_after(math.inf if deadline is None else deadline - now):
                await self._poke.wait()
            if self._poke.is_set():
                self._poke = anyio.Event()
