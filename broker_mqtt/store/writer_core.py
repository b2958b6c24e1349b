"""The writer half of an elected store, sans-io (``docs/elected-stores.md`` § 9).

A :class:`WriterCore` is the writer half of a :class:`~.replication.Replica`: it learns who the master
is from the replicas' heartbeats and ``active`` messages, sends each write ``(writer, n, command)`` to
it, re-sends unanswered writes to every new master and every ``retry_interval``, and reports answers.
Each write carries the epoch of the master it is meant for, which names that master: :func:`.routes.routes`
sends it to that master's endpoint only, on ``/$store/<name>/ew`` (the other replicas never see it).
It keeps no copy of the data, never votes and is never master.

Exactly once: the master applies each writer's writes once, in ``n`` order, and remembers per writer
the last ``n`` applied (that memory travels with the store, across handovers). A writer whose id is a
deterministic name of *what* it writes (a Spark job, batch and partition, say) and that numbers its
writes the same way when it runs again therefore gets its repeats answered, not applied: a retried
task changes nothing twice.

Nothing here does I/O or reads a clock: the caller passes ``now`` and calls :meth:`WriterCore.tick` at
:attr:`WriterCore.next_deadline`; :class:`~.writer.StoreWriter` is the anyio layer that runs one on an
endpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ForgedMessage
from .commands import Put, WriteCommand, answers_none
from .errors import AnswerForgotten, StoreError, Timeout, error_from_wire
from .history import Epoch
from .packing import checked_copy, checked_size, is_plain, is_small_int, plain_size
from .replica_events import Role
from .replica_messages import Active, Heartbeat, Write, WriteAck, decode, encode, group_writes, sender_of

__all__ = ["NoMaster", "WriterCore"]

#: bytes a write's log record and its message add to the write's own encoding (epoch, stamps, origin
#: and writer ids, the node message and topic): ``check_size`` is asked about the record that carries
#: a write, so that a write is refused when placed if the broker would refuse that (PayloadTooLarge)
RECORD_SLACK = 1024
#: bytes of a write below which its size is not checked against the broker's maximum packet: a broker
#: that cannot carry a few kilobytes cannot carry this store's own messages (snapshot chunks, log
#: messages of 64 records) either; the check is then saved on the usual small put
SMALL_WRITE = 4096
_SMALL: frozenset[type] = frozenset({int, float, bool, type(None)})  # values of at most 9 bytes (is_small_int ints)


def _plain_put_size(put: Put) -> int | None:
    """A bound of the size of a put of plain values (its whole wire: the expiry too), 0 for the usual
    small one (a short ASCII key, a number: no check needed), None for any other: encode it to know."""
    expiry, key, value = put.expiry, put.key, put.value
    if put.publisher is not None or not (expiry is None or type(expiry) is float or type(expiry) is int):
        return None
    if type(key) is str and type(value) in _SMALL and len(key) <= SMALL_WRITE and key.isascii() \
            and (type(value) is not int or is_small_int(value)):
        return 0
    if is_plain(key) and is_plain(value):
        return plain_size(key) + plain_size(value) + 32
    return None


class NoMaster(Timeout):
    """A write could not be placed: no master answered within the write timeout (outcome unknown)."""


@dataclass(slots=True)
class _Pending:
    cmd: list[Any]
    deadline: float
    sent: float = -math.inf
    gap_seen: bool = False  # its wack was lost (a later one showed it); sent again at once, once


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
        self._outbox: list[Write] = []
        self._answers: list[tuple[int, Any]] = []
        self._retry_at = now + retry_interval
        #: writes whose answer (a ``wack``) was lost, shown by a later one: each was sent again
        self.answers_lost = 0

    @property
    def pending(self) -> int:
        return len(self._writes)

    @property
    def next_deadline(self) -> float:
        # writes are kept in ``n`` order, which is the order of their deadlines: the first is due first
        first = next(iter(self._writes.values()), None)
        return self._retry_at if first is None else min(self._retry_at, first.deadline)

    def write(self, command: WriteCommand, now: float, *, check_size: Callable[[int], None] | None = None) -> int:
        """Queue ``command`` as the next write; return its number. Raises BackendError, and queues
        nothing, if it holds a key or value outside the data model (it would fail later, in the
        loop that sends it or logs it at the master, and stop that loop); ``check_size`` (the
        endpoint's ``check_payload_size``) is called with the size of the record that would carry it
        (its encoding's, a bound for plain puts, and RECORD_SLACK) and may raise too (PayloadTooLarge:
        the broker would refuse the message that carries it). The write holds a copy of the
        command's lists and dicts (:func:`~.packing.checked_copy`): the caller may change its own
        afterwards, and the master's state is what the followers decode."""
        if not isinstance(command, WriteCommand):
            raise TypeError(f"not a store write command: {command!r}")
        wire = command.to_wire()
        size = _plain_put_size(command) if type(command) is Put else None
        if size is None:
            if all(map(is_plain, wire)):  # (scalars only, an acquire's: nothing to copy)
                size = checked_size(wire)
            else:  # the caller's lists and dicts (and subclasses) stay the caller's
                size, wire = checked_copy(wire)
        if check_size is not None and size > SMALL_WRITE:
            check_size(size + RECORD_SLACK)
        n = self._next_n
        self._next_n += 1
        p = self._writes[n] = _Pending(wire, now + self.write_timeout)
        if self.master is not None:
            p.sent = now
            self._outbox.append(self._message(n, p))
        return n

    def handle(self, msg: Any, now: float, *, sender: str | None = None) -> None:
        """Look at one store message (a wire list): the master's identity, and answers to this
        writer. Raises StoreDecodeError for a malformed message, and
        :class:`~broker_mqtt.errors.ForgedMessage` when ``sender`` (the endpoint id in hex that the
        message's topic proves) is given and is not the one the message claims (state unchanged)."""
        message = decode(msg)
        if sender is not None and sender_of(message) != sender:
            raise ForgedMessage(f"a {msg[0]} message from endpoint {sender} claims to be from {sender_of(message)}")
        match message:
            case Heartbeat(node=node, epoch=epoch, role=Role.MASTER) if epoch is not None:
                self.set_master(epoch, node, now)
            case Active(epoch=epoch):
                self.set_master(epoch, epoch[1], now)
            case WriteAck(epoch=epoch, writer=writer, upto=upto, results=results, after=after) \
                    if writer == self.writer:
                if self.epoch is None or epoch >= self.epoch:
                    self.answered(upto, results, after, now)

    def tick(self, now: float) -> None:
        if now >= self._retry_at:
            self._retry_at = now + self.retry_interval
            if self.master is not None and any(p.sent <= now - self.retry_interval for p in self._writes.values()):
                self._resend(now)
        writes = self._writes
        while writes:
            n, p = next(iter(writes.items()))
            if now < p.deadline:
                break  # the rest are due later (n order is deadline order)
            del writes[n]
            why = ("no master is known" if self.master is None else
                   f"master {self.master} did not confirm it in time (busy, unreachable, or without a "
                   f"second live replica to confirm it, as durability 'one' and 'all' need)")
            self._answers.append((n, NoMaster(f"write {n} of {self.writer} not acknowledged within "
                                              f"{self.write_timeout} s: {why} (outcome unknown)")))

    def to_send(self) -> list[list[Any]]:
        """Drain the writes to send, as wire lists (:mod:`.routes` says where each goes): the writes
        queued since the last call travel together, up to 256 to a message."""
        return [encode(m) for m in group_writes(self.messages())]

    def messages(self) -> list[Write]:
        """Drain the writes to send, as messages (a replica routes its own)."""
        out, self._outbox = self._outbox, []
        return out

    def abandon(self, error: StoreError) -> None:
        """The writer stops: every write not answered yet is answered ``error`` (queued for
        :meth:`answers`), and nothing more is sent."""
        self._answers.extend((n, error) for n in self._writes)
        self._writes.clear()
        self._outbox.clear()

    def answers(self) -> Sequence[tuple[int, Any]]:
        out = self._answers
        if not out:
            return ()  # asked once per write: no new list while there is nothing
        self._answers = []
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
        """Send every unanswered write again (to a new master, or at the retry interval), saying that
        this writer holds the answers of all writes before the first: a master that never applied
        some of those (they were lost with the master that answered them: durability "master", or
        that master and every replica that held them gone) applies the rest, instead of holding them
        for ever for the ones this writer will never send again."""
        since = next(iter(self._writes), None)  # (n order)
        for n, p in self._writes.items():
            p.sent = now
            self._outbox.append(self._message(n, p, since))

    def _message(self, n: int, p: _Pending, since: int | None = None) -> Write:
        """A write for the current master: it carries that master's epoch, which routes it to that
        master's endpoint, and any other master (one that receives it late, after a split healed)
        ignores it."""
        return Write(self.writer, n, self.origin, p.cmd, self.epoch, since)

    def answered(self, upto: int, results: dict[int, Any], after: int | None = None,
                 now: float | None = None) -> int:
        """The master applied (durably) every write up to ``upto``; ``results``: answers by number
        (None where a write has none) of the writes after ``after`` (None: all). A write up to
        ``after`` still pending here was answered by a wack that never arrived (lost on a reconnect,
        or dropped by a full broker queue): it stays pending and is sent again (at once, given
        ``now`` and a master: before later writes push its answer out of the state's memory; once,
        then with the retries), so that the master answers it again (its answer, or
        AnswerForgotten), never None for want of it. Returns how many writes it found so (each
        counted once, in :attr:`answers_lost` too)."""
        writes = self._writes
        lost = 0
        if after is not None and writes and next(iter(writes)) <= after:  # an earlier wack was lost
            due = [n for n in writes if after < n <= upto]
            # (without since, unlike _resend: the master of this wack's epoch applied every write up to
            # upto >= after, so since would make it pass over nothing; a wack of an epoch newer than the
            # writer's is followed by that master's heartbeat or active, and set_master sends them again
            # with since. A master from 2026-11-27 or 11-28, which sends after, refuses a write
            # carrying since as malformed: with it, what such a master answers now would fail.)
            resend_at = now if self.master is not None else None
            for n, p in writes.items():
                if n > after:
                    break
                if not p.gap_seen:  # not again for each later wack of the same gap
                    p.gap_seen = True
                    lost += 1
                    if resend_at is not None:
                        p.sent = resend_at
                        self._outbox.append(self._message(n, p))
            self.answers_lost += lost
        else:  # the usual case: the first pending writes, up to upto (n order)
            due = []
            for n in writes:
                if n > upto:
                    break
                due.append(n)
        for n in due:
            p = writes.pop(n)
            result = results.get(n)
            if isinstance(result, list) and result[:1] == ["error"]:
                error = error_from_wire(result[1:])
                # a put, an erase or a clear that was applied has no answer to forget: None (a master
                # finds a write's answer in the log by its record's n, the last of a batch of puts)
                self._answers.append((n, None if type(error) is AnswerForgotten and answers_none(p.cmd) else error))
            else:
                self._answers.append((n, result))
        return lost
