"""Writing into an elected store without holding a replica: the anyio layer (``docs/elected-stores.md`` § 9).

:class:`StoreWriter` runs one :class:`~.writer_core.WriterCore` (the sans-io writer: master tracking,
retries, exactly-once numbering) on an endpoint: it subscribes to the master's announcements and to
the answers for this endpoint's writers, owns the timer, and sends what the core queues (:mod:`.routes`
says where). It keeps no copy of the data, never votes and is never master: a Spark task, a script, a
gateway with no disk can write into a store this way:
``async with StoreWriter(ep, "config", "job-7/p3") as w: await w.put("k", 1)``.
"""

from __future__ import annotations

import logging
import math
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio

from ..errors import ForgedMessage, PayloadTooLarge
from ..wire.message import Kind
from .commands import Put, WriteCommand
from .errors import StoreDecodeError, StoreError, Timeout
from .replica_messages import split
from .routes import answers_topic, master_topic, routes
from .writer_core import NoMaster, WriterCore

if TYPE_CHECKING:
    from ..endpoint.endpoint import Endpoint

log = logging.getLogger("broker_mqtt.store")

__all__ = ["NoMaster", "WriterCore", "StoreWriter"]


class StoreWriter:
    """Writes into elected store ``name`` from ``ep`` as writer ``writer_id`` (no replica here).

    ``writer_id`` must be unique among the store's writers; reuse it (with the same write order) only
    to repeat the same writes, which are then answered and not applied again. ``write``/``put`` wait
    until the write is durable and raise its error; ``put_nowait`` queues and ``drain`` waits for all.
    """

    def __init__(self, ep: Endpoint, name: str, writer_id: str, *, write_timeout: float = 30.0,
                 max_pending: int = 10_000) -> None:
        if not writer_id or "/" in name:
            raise ValueError("a writer needs an id and a store name without '/'")
        self.endpoint = ep
        self.name = name
        self.core = WriterCore(writer_id, ep.id.hex, anyio.current_time(), write_timeout=write_timeout)
        self.max_pending = max_pending
        #: messages dropped because they claim another endpoint than the one their topic names
        self.forged = 0
        self._results: dict[int, Any] = {}
        self._errors: list[tuple[int, StoreError]] = []
        self._changed = anyio.Event()
        self._pump = anyio.Event()
        self._tg: Any = None
        self._sub: Any = None
        self.closed = False
        self._draining = False

    async def __aenter__(self) -> Self:
        # the master's announcements and the answers to this endpoint's writers; not the log. Also
        # from this endpoint: the master may be a replica on it
        self._sub = self.endpoint.subscribe(master_topic(self.name), answers_topic(self.name), kind=Kind.COMMAND,
                                      local=True, buffer=4096)
        await self._sub.__aenter__()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._receive)
        self._tg.start_soon(self._timer)
        self._tg.start_soon(self._pump_loop)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.closed = True
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(None, None, None)
        finally:  # also when cancelled: the subscription's streams are closed and it is detached
            # the writes not answered: their outcome unknown (they may have reached the master); their
            # callers waited for ever (a queue consumer's settle, say, while the queue closed)
            self.core.abandon(Timeout(f"store {self.name!r}: the writer closed before the write was answered "
                                      "(outcome unknown)"))
            self._collect()
            await self._sub.__aexit__(None, None, None)

    @property
    def answers_lost(self) -> int:
        """Writes whose answer was lost on the way (a later answer showed the gap): each was sent
        again and answered as a repeat (its answer, or AnswerForgotten)."""
        return self.core.answers_lost

    async def await_master(self, timeout: float | None = None) -> bool:
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while self.core.master is None:
                await self._changed.wait()
            return True
        return False

    async def put(self, key: Any, value: Any, *, expiry: float | None = None) -> None:
        await self.write(Put(key, value, expiry))

    async def write(self, command: WriteCommand) -> Any:
        n = await self._queue(command)
        while n not in self._results:
            await self._changed.wait()
        result = self._results.pop(n)
        if isinstance(result, StoreError):
            raise result
        return result

    async def put_nowait(self, key: Any, value: Any, *, expiry: float | None = None) -> int:
        """Queue a put (waiting only while ``max_pending`` writes are unanswered); see :meth:`drain`."""
        return await self._queue(Put(key, value, expiry), keep=False)

    async def drain(self) -> None:
        """Wait until every queued write is answered; raise the first error of a ``put_nowait``."""
        while self.core.pending:
            await self._changed.wait()
        if self._errors:
            n, error = self._errors[0]
            self._errors.clear()
            raise error

    async def _queue(self, command: WriteCommand, *, keep: bool = True) -> int:
        while self.closed or self.core.pending >= self.max_pending:
            if self.closed:
                raise StoreError(f"store {self.name!r}: the writer is closed")
            await self._changed.wait()
        n = self.core.write(command, anyio.current_time(), check_size=self.endpoint.check_payload_size)
        if not keep:
            self._results[n] = _FORGET
        self._pump.set()  # sent by the pump, with the writes queued before it runs: as few messages
        return n

    async def _receive(self) -> None:
        async for msg in self._sub:
            try:
                self.core.handle(msg.data, anyio.current_time(), sender=msg.sender_hex)
            except ForgedMessage as exc:
                self.forged += 1
                log.warning("store %s: dropped a forged message: %s", self.name, exc)
                continue
            except StoreDecodeError:
                continue
            self._collect()
            await self._flush()

    async def _pump_loop(self) -> None:
        while True:
            await self._pump.wait()
            self._pump = anyio.Event()
            await self._flush()

    async def _timer(self) -> None:
        while True:
            await anyio.sleep(max(0.0, min(self.core.next_deadline - anyio.current_time(), 0.5)))
            self.core.tick(anyio.current_time())
            self._collect()
            await self._flush()

    def _collect(self) -> None:
        answers = self.core.answers()
        for n, result in answers:
            if self._results.get(n) is _FORGET:
                del self._results[n]
                if isinstance(result, StoreError):
                    self._errors.append((n, result))
            else:
                self._results[n] = result
        self._changed.set()
        self._changed = anyio.Event()

    async def _flush(self) -> None:
        if self._draining:
            return
        self._draining = True
        try:
            while True:
                out = self.core.to_send()
                if not out:
                    break
                for msg in out:  # to the master's endpoint (routes): the other replicas never see it
                    await send_routed(self.endpoint, self.name, msg)
        finally:
            self._draining = False



_FORGET = object()


async def send_routed(ep: Endpoint, name: str, msg: list[Any]) -> None:
    """Send a replica's or a writer's message of store ``name`` where :func:`.routes.routes` says; one
    too large for the transport (many writes or records together) goes as two halves, each again
    halved while too large."""
    # An ack at QoS 0: no PUBACK either way (the master's process sent one for each follower's ack);
    # one lost (a reconnect, a broker that drops it) is made up for by the follower's next heartbeat
    qos = 0 if msg[0] == "ack" else None
    try:
        for topic, endpoint in routes(name, msg):
            await ep.send_node(Kind.COMMAND, topic, msg, receivers=None if endpoint is None else (endpoint,), qos=qos)
    except PayloadTooLarge:
        halves = split(msg)
        if halves is None:
            raise
        for half in halves:
            await send_routed(ep, name, half)
