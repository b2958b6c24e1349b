"""Writing into an elected store without holding a replica (``docs/elected-stores.md`` § 9).

A :class:`WriterCore` is the writer half of a :class:`~.replication.Replica`: it learns who the master
is from the replicas' heartbeats and ``active`` messages, sends each write ``(writer, n, command)`` to
it, re-sends unanswered writes to every new master and every ``retry_interval``, and reports answers.
Each write carries the epoch of the master it is meant for, which names that master: :func:`.routes.routes`
sends it to that master's endpoint only, on ``/$store/<name>/ew`` (the other replicas never see it).
It keeps no copy of the data, never votes and is never master: a Spark task, a script, a gateway with
no disk can write into a store this way.

Exactly once: the master applies each writer's writes once, in ``n`` order, and remembers per writer
the last ``n`` applied (that memory travels with the store, across handovers). A writer whose id is a
deterministic name of *what* it writes (a Spark job, batch and partition, say) and that numbers its
writes the same way when it runs again therefore gets its repeats answered, not applied: a retried
task changes nothing twice.

:class:`StoreWriter` runs one on an endpoint: ``async with StoreWriter(ep, "config", "job-7/p3") as w:
await w.put("k", 1)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio

from ..wire.message import Kind
from .commands import Put, WriteCommand
from .errors import StoreDecodeError, StoreError, Timeout, error_from_wire
from .routes import answers_topic, master_topic, routes
from .versioned import Epoch, epoch_from_wire

if TYPE_CHECKING:
    from ..endpoint.endpoint import Endpoint

__all__ = ["NoMaster", "WriterCore", "StoreWriter"]


class NoMaster(Timeout):
    """A write could not be placed: no master answered within the write timeout (outcome unknown)."""


@dataclass(slots=True)
class _Pending:
    cmd: list[Any]
    deadline: float
    sent: float = -math.inf


class WriterCore:
    """Sans-io: ``write`` → ``to_send``; ``handle`` every store message; ``tick`` at ``next_deadline``;
    ``answers()`` drains ``(n, result | StoreError)``."""

    def __init__(self, writer: str, origin: str, now: float, *, write_timeout: float = 30.0,
                 retry_interval: float = 1.0, first_n: int = 1) -> None:
        self.writer = writer
        self.origin = origin
        self.write_timeout = write_timeout
        self.retry_interval = retry_interval
        self.master: str | None = None
        self.epoch: Epoch | None = None
        self._next_n = first_n
        self._writes: dict[int, _Pending] = {}
        self._outbox: list[list[Any]] = []
        self._answers: list[tuple[int, Any]] = []
        self._retry_at = now + retry_interval

    @property
    def pending(self) -> int:
        return len(self._writes)

    @property
    def next_deadline(self) -> float:
        return min([self._retry_at, *(p.deadline for p in self._writes.values())])

    def write(self, command: WriteCommand, now: float) -> int:
        """Queue ``command`` as the next write; return its number."""
        if not isinstance(command, WriteCommand):
            raise TypeError(f"not a store write command: {command!r}")
        n = self._next_n
        self._next_n += 1
        p = self._writes[n] = _Pending(command.to_wire(), now + self.write_timeout)
        if self.master is not None:
            p.sent = now
            self._outbox.append(self._message(n, p))
        return n

    def handle(self, msg: Any, now: float) -> None:
        """Look at one store message: the master's identity, and answers to this writer."""
        if not isinstance(msg, (list, tuple)) or not msg or not isinstance(msg[0], str):
            raise StoreDecodeError(f"a replication message is a list with a kind, got {msg!r:.80}")
        kind = msg[0]
        try:
            if kind == "hb" and msg[3] == "master":
                self.set_master(epoch_from_wire(msg[2]), msg[1], now)
            elif kind == "active":
                epoch = epoch_from_wire(msg[1])
                self.set_master(epoch, epoch[1], now)
            elif kind == "wack" and msg[2] == self.writer:
                epoch = epoch_from_wire(msg[1])
                if self.epoch is None or epoch >= self.epoch:
                    self.answered(int(msg[3]), {int(n): r for n, r in msg[4]})
        except (TypeError, ValueError, IndexError) as exc:
            raise StoreDecodeError(f"bad {kind} message: {exc}") from exc

    def tick(self, now: float) -> None:
        if now >= self._retry_at:
            self._retry_at = now + self.retry_interval
            if self.master is not None and any(p.sent <= now - self.retry_interval for p in self._writes.values()):
                self._resend(now)
        for n, p in list(self._writes.items()):
            if now >= p.deadline:
                del self._writes[n]
                why = ("no master is known" if self.master is None else
                       f"master {self.master} did not confirm it in time (busy, unreachable, or without a "
                       f"second live replica to confirm it, as durability 'one' and 'all' need)")
                self._answers.append((n, NoMaster(f"write {n} of {self.writer} not acknowledged within "
                                                  f"{self.write_timeout} s: {why} (outcome unknown)")))

    def to_send(self) -> list[list[Any]]:
        out, self._outbox = self._outbox, []
        return out

    def answers(self) -> list[tuple[int, Any]]:
        out, self._answers = self._answers, []
        return out

    def set_master(self, epoch: Epoch, master: str, now: float) -> None:
        """``master`` is active in ``epoch``: send it every unanswered write (ignored if older)."""
        if self.epoch is not None and epoch < self.epoch:
            return
        changed = master != self.master or epoch != self.epoch
        self.epoch, self.master = epoch, master
        if changed:
            self._resend(now)

    def clear_master(self) -> None:
        """No master is active (a handover): hold writes until the next one."""
        self.master = None

    def _resend(self, now: float) -> None:
        for n, p in sorted(self._writes.items()):
            p.sent = now
            self._outbox.append(self._message(n, p))

    def _message(self, n: int, p: _Pending) -> list[Any]:
        """A write for the current master: it carries that master's epoch, which routes it to that
        master's endpoint, and any other master (one that receives it late, after a split healed)
        ignores it."""
        return ["write", self.writer, n, self.origin, p.cmd, None if self.epoch is None else list(self.epoch)]

    def answered(self, upto: int, results: dict[int, Any]) -> None:
        """The master applied (durably) every write up to ``upto``; ``results``: answers by number."""
        for n in [n for n in self._writes if n <= upto]:
            del self._writes[n]
            result = results.get(n)
            if isinstance(result, list) and result[:1] == ["error"]:
                self._answers.append((n, error_from_wire(result[1:])))
            else:
                self._answers.append((n, result))


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
        self.ep = ep
        self.name = name
        self.core = WriterCore(writer_id, ep.id.hex, anyio.current_time(), write_timeout=write_timeout)
        self.max_pending = max_pending
        self._results: dict[int, Any] = {}
        self._errors: list[tuple[int, StoreError]] = []
        self._changed = anyio.Event()
        self._tg: Any = None
        self._sub: Any = None
        self._draining = False

    async def __aenter__(self) -> Self:
        # the master's announcements and the answers to this endpoint's writers; not the log. Also
        # from this endpoint: the master may be a replica on it
        self._sub = self.ep.subscribe(master_topic(self.name), answers_topic(self.name), kind=Kind.COMMAND,
                                      local=True, buffer=4096)
        await self._sub.__aenter__()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._receive)
        self._tg.start_soon(self._timer)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        await self._sub.__aexit__(None, None, None)

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
        while self.core.pending >= self.max_pending:
            await self._changed.wait()
        n = self.core.write(command, anyio.current_time())
        if not keep:
            self._results[n] = _FORGET
        await self._flush()
        return n

    async def _receive(self) -> None:
        async for msg in self._sub:
            try:
                self.core.handle(msg.data, anyio.current_time())
            except StoreDecodeError:
                continue
            self._collect()
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
                    for topic, endpoint in routes(self.name, msg):
                        await self.ep.send_node(Kind.COMMAND, topic, msg,
                                                receivers=None if endpoint is None else (endpoint,))
        finally:
            self._draining = False


_FORGET = object()
