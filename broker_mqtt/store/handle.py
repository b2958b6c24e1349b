"""The part of the anyio I/O layer that master and clone store handles share (``docs/stores.md`` § 6).

Theory of operation:

* A handle (:class:`.MasterStore` or :class:`.CloneStore`) wraps one sans-io core (:class:`.Master` /
  :class:`.Clone`) and runs as a service of its endpoint (``Endpoint.start_service``): a receive
  loop feeds every store message to the core, a timer loop calls ``tick`` at the core's
  ``next_deadline`` (at least every ``ack_interval``), and after every core call the handle drains
  ``to_send()`` into ``Endpoint.send_node(Kind.COMMAND, ...)`` in order (one drainer at a time);
  the cores send runs of consecutive channel events as one ``EventBatch`` message. An
  application write is sent at once unless it follows the previous one within ``_BURST_GAP``:
  then a sender task drains it as soon as the writer yields (inline every ``_DRAIN_EVERY``
  writes), so a burst leaves as a few large messages and a lone write without delay.
* Topics of store ``name`` (node messages of kind COMMAND): ``/$store/<name>/m`` master → clones
  (broadcast, and unicast handshakes/retransmissions/writer ACKs), ``/$store/<name>/c`` clones →
  master (unicast; discovery queries are broadcast there), ``/$store/<name>/a`` discovery answers
  and master announcements.
* A :class:`.Faults` injector between transport and core can drop and delay (reorder) incoming
  store messages with a seeded ``random.Random``, for tests.
* Data events come from the handle's :class:`.ObservedBackend`, status events from the handle;
  both are delivered through :class:`.EventStream` s, which end when the handle closes.

What differs between master and clone (discovery, where messages go, the operations) lives in
:mod:`.master_handle` and :mod:`.clone_handle`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.lowlevel

from .. import channel as ch
from ..endpoint.event_stream import EventStream
from ..errors import PayloadTooLarge
from ..wire.identity import node_endpoint
from ..wire.message import Kind
from .clock import clock
from .commands import WriteCommand
from .discovery import claimed_node, decode_store_message
from .errors import StoreDecodeError, StoreError
from .events import EventsDropped, StoreStatistics
from .faults import FaultInjector, Faults
from .master import Envelope
from .node_ids import new_node_id
from .observed import ObservedBackend
from .operations import WriteOperations
from .packing import checked_size

if TYPE_CHECKING:
    from ..endpoint.endpoint import Endpoint

__all__ = ["DEFAULT_CHANNEL", "DEFAULT_EVENT_BUFFER", "SCALARS", "StoreHandle", "channel_config"]

#: Channel timers of attached stores: ACKs every 50 ms (so ``await_idle`` answers quickly), a
#: heartbeat per second, a peer silent for 5 s is dead.
DEFAULT_CHANNEL = ch.ChannelConfig(heartbeat_interval=1.0, ack_interval=0.05, connection_timeout=5)
DEFAULT_EVENT_BUFFER = 10_000

SCALARS = (int, float, bool, type(None))  # small by nature: no size check on the hot path
_ENVELOPE_SLACK = 512  # channel message, node message and topic around a command's own encoding
_DRAIN_EVERY = 256  # writes queued in a core before the writer drains it itself
_BURST_GAP = 100e-6  # seconds between application writes below which they are sent together


def channel_config(channel: ch.ChannelConfig | None) -> ch.ChannelConfig:
    """``channel``, or :data:`DEFAULT_CHANNEL` if None."""
    return channel if channel is not None else DEFAULT_CHANNEL


class StoreHandle(WriteOperations):
    """Service loop, sending, idle waiting, event and status streams."""

    role = "?"

    def __init__(self, ep: Endpoint, name: str, *, config: ch.ChannelConfig, faults: Faults | None,
                 event_buffer: int) -> None:
        self.endpoint = ep
        self.name = name
        base = f"/$store/{name}"
        self._t_master, self._t_clones, self._t_answers = base + "/m", base + "/c", base + "/a"
        self.config = config
        self.id = new_node_id(ep.id)
        self._injector = FaultInjector(faults) if faults is not None else None
        self._event_buffer = event_buffer
        self._status_streams: list[EventStream[Any]] = []
        self._sendq: deque[Envelope] = deque()
        self._unsent = 0  # application writes in the core not drained yet
        self._last_write = -math.inf  # anyio.current_time() of the latest application write
        self._kick_event = anyio.Event()
        self._kicked = False
        self._draining = False
        self._drain_waiter: anyio.Event | None = None
        self._changed = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._done = anyio.Event()
        self.closed = False
        self.malformed = 0
        #: messages dropped because they speak for a node of another endpoint than their topic names
        self.forged = 0
        self.observed: ObservedBackend  # set by subclasses

    # -- public ----------------------------------------------------------------------------------

    def events(self, *, buffer: int | None = None) -> EventStream[Any]:
        """Changes of this replica: ``async with s.events() as ev: async for e in ev``.

        Inserted/Updated/Erased/Expired in the order applied here. A stream ``buffer`` events
        behind loses the newest and then yields one :class:`EventsDropped` with their count, where
        the gap is (after the events it held).
        """
        return EventStream(self.observed.streams, buffer or self._event_buffer, dropped=EventsDropped)

    def status(self, *, buffer: int = 1000) -> EventStream[Any]:
        """Status events (:data:`StoreStatus`): staleness, master changes, clones, failed writes."""
        return EventStream(self._status_streams, buffer, dropped=EventsDropped)

    async def await_idle(self, timeout: float | None = None) -> bool:
        """Wait until this replica is idle (``docs/stores.md`` § 3/4); False on timeout.

        Cancelling it changes nothing. Idle is a moment: a later write makes it busy again.
        False at once once the handle is closed.
        """
        return await self._wait_until(self._core_idle, timeout)

    async def _wait_until(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``done()`` holds (True), the handle is closed or ``timeout`` passes (False)."""
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while not done():
                if self.closed:
                    return False
                self._changed = anyio.Event() if self._changed.is_set() else self._changed
                await self._changed.wait()
            return True
        return False

    def statistics(self) -> StoreStatistics:
        inj = self._injector
        return StoreStatistics(self.malformed, inj.dropped if inj else 0, inj.delayed if inj else 0,
                               len(self._sendq))

    async def close(self) -> None:
        """Detach: stop the service (what is not sent yet is not sent) and close the backend."""
        if self._scope is not None:
            self._scope.cancel()
        await self._done.wait()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # -- internals -------------------------------------------------------------------------------

    def _core_idle(self) -> bool:
        raise NotImplementedError

    def _status(self, event: Any) -> None:
        for s in self._status_streams:
            s._put(event)

    def _notify(self) -> None:
        self._changed.set()

    def _check_open(self) -> None:
        if self.closed:
            raise StoreError(f"store {self.name!r} ({self.role}) is closed")

    def _take(self) -> list[Envelope]:
        """Drain the core (every caller of ``to_send`` goes through here)."""
        self._unsent = 0
        return self.core.to_send()  # type: ignore[attr-defined, no-any-return]  # set by subclasses

    async def _wrote(self) -> None:
        """After an application write: a lone write is sent at once (no added latency); a write
        within ``_BURST_GAP`` of the previous one is left for the sender task, which runs as soon
        as the writer yields, so a burst leaves as a few large messages (inline every
        ``_DRAIN_EVERY`` writes). Either way every write is sent, in order."""
        self._unsent += 1
        now = anyio.current_time()
        burst, self._last_write = now - self._last_write < _BURST_GAP, now
        if self._kicked:  # the sender task will drain
            if self._unsent >= _DRAIN_EVERY:
                await self._flush(self._take())
        elif burst:
            self._kicked = True
            self._kick_event.set()
        else:
            await self._flush(self._take())

    async def _sender_loop(self) -> None:
        while True:
            await self._kick_event.wait()
            self._kick_event = anyio.Event()
            self._kicked = False
            await self._flush(self._take())

    async def _flush(self, envelopes: list[Envelope]) -> None:
        """Send envelopes in order; one drainer at a time, later callers wait if it is far behind."""
        if not envelopes:
            return
        q = self._sendq
        q.extend(envelopes)
        if self._draining:
            while self._draining and len(q) > 10_000:
                if self._drain_waiter is None:
                    self._drain_waiter = anyio.Event()
                await self._drain_waiter.wait()
            return
        self._draining = True
        try:
            while q:
                batch = list(q)
                q.clear()
                for env in batch:
                    await self._send_split(env)
        finally:
            self._draining = False
            if self._drain_waiter is not None:
                self._drain_waiter.set()
                self._drain_waiter = None

    async def _send_split(self, env: Envelope) -> None:
        """Send; a batch of events too large for the broker goes as two halves (recursively)."""
        msg = env.message
        try:
            await self._send(env)
        except PayloadTooLarge:
            if not isinstance(msg, ch.EventBatch) or len(msg.payloads) < 2:
                raise
            half = len(msg.payloads) // 2
            for first, payloads in ((msg.first_seq, msg.payloads[:half]),
                                    (msg.first_seq + half, msg.payloads[half:])):
                part = ch.EventBatch(msg.producer, first, payloads) if len(payloads) > 1 else \
                    ch.Event(msg.producer, first, payloads[0])
                await self._send_split(Envelope(part, env.to))

    async def _send(self, env: Envelope) -> None:
        raise NotImplementedError

    async def _service(self, *, task_status: anyio.abc.TaskStatus[Any]) -> None:
        try:
            with anyio.CancelScope() as self._scope:
                async with self.endpoint.subscribe(*self._prefixes(), kind=Kind.COMMAND, local=True,
                                                   buffer=1024) as sub:
                    await self._setup(sub)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._timer_loop)
                        tg.start_soon(self._sender_loop)
                        task_status.started(self)
                        await self._receive_loop(sub)
                        tg.cancel_scope.cancel()
        finally:
            self.closed = True
            for s in [*self._status_streams, *self.observed.streams]:
                s._close()
            self._fail_waiters()
            self._notify()
            self.observed.close()
            self._done.set()

    def _prefixes(self) -> tuple[str, ...]:
        raise NotImplementedError

    async def _setup(self, sub: Any) -> None:
        pass

    def _fail_waiters(self) -> None:
        pass

    async def _receive_loop(self, sub: Any) -> None:
        async for msg in sub:
            try:
                decoded = decode_store_message(msg.data)
            except (StoreDecodeError, ch.ChannelDecodeError):
                self.malformed += 1
                continue
            claimed = claimed_node(decoded)
            if claimed is not None and node_endpoint(claimed) != msg.sender_hex:
                self.forged += 1  # it speaks for a node of another endpoint than the topic proves
                continue
            now = clock()
            if self._injector is None:
                await self._deliver(decoded, msg, now)
            else:
                for m, origin in self._injector.filter(decoded, msg, now):
                    await self._deliver(m, origin, now)
            self._notify()

    async def _deliver(self, msg: Any, origin: Any, now: float) -> None:
        """Handle one decoded store message; ``origin`` is the endpoint Message it came in
        (``origin.sender`` is the sending endpoint; read only when needed, it costs a UUID)."""
        raise NotImplementedError

    def _next_deadline(self) -> float:
        raise NotImplementedError

    async def _tick(self, now: float) -> None:
        raise NotImplementedError

    async def _timer_loop(self) -> None:
        cap = self.config.ack_interval
        while True:
            now = clock()
            if self._injector is not None:
                for m, sender in self._injector.due(now):
                    await self._deliver(m, sender, now)
            deadline = self._next_deadline()
            if self._injector is not None:
                deadline = min(deadline, self._injector.next_deadline)
            if deadline <= now:
                await self._tick(now)
                self._notify()
                await anyio.lowlevel.checkpoint()
                continue
            await anyio.sleep(min(deadline - now, cap))

    # -- the operations (writes go through _write) ----------------------------------------------------

    async def _write(self, command: WriteCommand) -> Any:
        raise NotImplementedError

    def _check_size(self, command: WriteCommand) -> None:
        """Raise BackendError now for a write outside the data model (what the clones' decoders
        refuse: a date, a UUID, a lone surrogate; broadcast, it stalled every clone's stream), and
        PayloadTooLarge for one whose message the broker would refuse (it would otherwise fail
        later in the sender task, after the core accepted it). Scalars need no check."""
        for value in (getattr(command, "key", None), getattr(command, "value", None),
                      getattr(command, "index", None)):
            if value is not None and not isinstance(value, SCALARS):
                size = checked_size(command.to_wire())
                self.endpoint.check_payload_size(size + _ENVELOPE_SLACK)
                return

