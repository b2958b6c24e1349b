"""Elected-store replication, sans-io: epochs, fencing, handover, durable writes, split merge.

Theory of operation (``docs/elected-stores.md``; the anyio layer is :mod:`.elected`):

* Every node of an elected store runs one :class:`Replica` over a :class:`~.versioned.VersionedState`.
  An election (asyncactor) says who holds the tag: the I/O layer calls :meth:`Replica.tagged` and
  :meth:`Replica.untagged`. Only the holder of the tag may become master, and only after a claim.
* **Claim.** The tagged node picks the epoch ``(highest term it has seen + 1, its id)`` (no two nodes
  can pick the same) and broadcasts ``claim``. Every replica that has not seen a higher epoch adopts it
  (from then on it ignores the log of every lower epoch: that is the fence) and answers ``promise``
  with its position and lineage. The claimant waits for a promise from every member it heard from
  within ``member_timeout`` (at most ``claim_timeout``), then takes the most advanced history among
  them and itself: it fetches the missing tail (or a snapshot) from whoever holds it. A claimant that is
  already caught up fetches nothing: the handover is an epoch change. When the histories diverged (a
  healed split) it fetches every divergent head and merges (:func:`~.state_merge.merge`).
  Then it broadcasts ``active`` and accepts writes. Losing the tag stops it accepting writes at once.
* **Writes.** Every replica is also a writer: write ``n`` of writer ``w`` goes to the master (applied
  here at :meth:`to_send` when this node is the master). The master applies a writer's writes in ``n``
  order, exactly once (``applied[w]`` travels with the state, so the next master knows it too), appends a :class:`Record`
  to its log (one for consecutive small puts of a writer: :mod:`.put_batch`) and broadcasts it. Replicas apply records in sequence order, make them durable, and
  ``ack``. The master answers ``wack(w, upto)`` once the write is durable per ``durability``:
  ``"master"`` (applied by the master), ``"one"`` (and by at least one other live replica: a store
  with no other replica cannot acknowledge such writes), ``"all"`` (by every live replica, at least
  one). A writer re-sends its
  unanswered writes to every new master and every ``retry_interval``; a write not answered within
  ``write_timeout`` fails with :class:`NoMaster` (its outcome is then unknown).
* **Resync.** A replica that misses records fetches them from the master; one whose history is not a
  prefix of the master's takes a snapshot when the master's ``active`` says its history was merged,
  and otherwise keeps its data and keeps announcing its position, which makes the master merge again.

Nothing here does I/O or reads a clock: the caller passes ``now`` (monotonic seconds), ``wall``
(wall-clock seconds, for expiries) and a :class:`~.history.Clock` over the wall clock it chooses
(the HLC that stamps records), calls :meth:`tick` at :attr:`next_deadline`, and sends what
:meth:`to_send` returns (wire lists, :func:`.replica_messages.encode`'s; :mod:`.routes` says which topic, and which endpoint,
each goes to); :meth:`handle` takes wire lists and decodes them with :func:`.replica_messages.decode`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ForgedMessage
from .commands import WriteCommand
from .errors import StoreDecodeError
from .replica_events import (
    ConflictsFound,
    DataChanged,
    Durability,
    MasterChanged,
    ReplicaConfig,
    ReplicaEvent,
    ReplicaStatistics,
    ResolverRefused,
    Role,
    StaleChanged,
    WriteDone,
    WriteFailed,
)
from .replica_follower import FollowerSide
from .replica_messages import (
    LOG_GROUP,
    Ack,
    Active,
    Claim,
    Fetch,
    Heartbeat,
    Log,
    Promise,
    Resign,
    Snap,
    SnapChunk,
    SnapFetch,
    Tail,
    Write,
    WriteAck,
    Writes,
    decode,
    sender_of,
)
from .writer_core import NoMaster

__all__ = [
    "Durability",
    "Role",
    "ReplicaConfig",
    "NoMaster",
    "DataChanged",
    "MasterChanged",
    "ConflictsFound",
    "ResolverRefused",
    "WriteDone",
    "WriteFailed",
    "StaleChanged",
    "ReplicaEvent",
    "ReplicaStatistics",
    "Replica",
]


class Replica(FollowerSide):
    """One node's replica of elected store ``name``; see the module docstring. The parts it is made
    of: :mod:`.replica_base` (state), :mod:`.replica_claim`, :mod:`.replica_master`,
    :mod:`.replica_follower`."""

    # -- queries --------------------------------------------------------------------------------------

    @property
    def is_master(self) -> bool:
        return self.role is Role.MASTER

    @property
    def ack_due(self) -> bool:
        """Records were applied since the last :meth:`to_send`, which sends their ack. The I/O layer
        drains after each message that sets this (not only at the end of a PUBLISH): the master
        answers the writes of one log message while this replica applies the next."""
        return self._ack_due

    @property
    def pending_writes(self) -> int:
        return self._writer.pending

    @property
    def idle(self) -> bool:
        """Not stale, no write unanswered and, at the master, every live member caught up."""
        if self.stale or self._writer.pending:
            return False
        if self.role is Role.MASTER:
            return all(m.acked >= self.state.last_seq for m in self._live_members().values())
        return True

    @property
    def next_deadline(self) -> float:
        times = [self._next_hb, self._writer.next_deadline]
        if self.tag and self.role is Role.FOLLOWER:
            times.append(self._reclaim_at)
        if self._claim is not None:
            if self._claim.fetching is None:  # waiting for promises
                times.append(self._claim.deadline)
            else:  # fetching: only the sources' deadlines matter (the claim's may have passed)
                times.extend(self._claim.fetching.values())
        if self._fetch_due():
            times.append(self._fetch_deadline)
        if self._taking_order or (self._snaps and self._staging_pending):
            times.append(self._now)  # the next slice of a snapshot's key order, or chunk to stage: at once
        elif self._read_ahead:
            times.append(self._read_ahead_at)
        return min(times)

    def members(self) -> list[str]:
        return sorted(self._live_members())

    @property
    def lag(self) -> int | None:
        """At the master: how many records the live member furthest behind has yet to acknowledge
        in this epoch (0 when every one is current, or none is live); None on any other node."""
        if self.role is not Role.MASTER:
            return None
        last = self.state.last_seq
        return max((last - m.acked for m in self._live_members().values()), default=0)

    # -- inputs: election -------------------------------------------------------------------------------

    def tagged(self, now: float) -> None:
        """The election made this node "it": claim mastership (no-op if already master)."""
        self._clock(now)
        self.tag = True
        if self.role is Role.FOLLOWER:
            self._start_claim(now)

    def untagged(self, now: float) -> None:
        """This node lost the tag: stop accepting writes at once."""
        self._clock(now)
        self.tag = False
        if self.role is not Role.FOLLOWER:
            was_master = self.role is Role.MASTER
            self._step_down()
            if was_master:
                self._send(Resign(self.epoch or (0, ""), self.state.position))
            self._set_master(None, "master resigned")

    def stop(self, now: float) -> list[list[Any]]:
        """This replica's file failed (BackendError): it stops, and must not send what it holds in
        memory and did not commit. Returns the messages to send last: the resignation, if it was
        master (so that the others need not wait for its heartbeats to stop); no log record, no
        acknowledgement, nothing else queued."""
        self.untagged(now)
        out = [msg for msg in self._outbox if msg[0] == "resign"]
        self._outbox, self._out_log, self._out_writes = [], [], []
        self._events = []
        return out

    def peer_gone(self, endpoint_hex: str) -> None:
        """The endpoint ``endpoint_hex`` left or died: forget its replicas (claims stop waiting)."""
        if self.master is not None and self.master != self.id and self.master.startswith(endpoint_hex):
            self._set_master(None, "the master's endpoint is gone")
        for node in [n for n in self._members if n.startswith(endpoint_hex)]:
            del self._members[node]
            if self._claim is not None:
                self._claim.waiting.discard(node)
        if self._claim is not None:
            self._progress_claim(self._now)

    # -- inputs: writes -------------------------------------------------------------------------------------

    def write(self, command: WriteCommand, now: float, *, check_size: Callable[[int], None] | None = None) -> int:
        """Queue a write; return its number ``n``, answered later by WriteDone/WriteFailed(n). Raises,
        queuing nothing, what :meth:`.writer_core.WriterCore.write` raises (BackendError for a key or
        value outside the data model; ``check_size``'s error for one too large)."""
        if not isinstance(command, WriteCommand):
            raise TypeError(f"not a store write command: {command!r}")
        self._clock(now)
        return self._writer.write(command, now, check_size=check_size)  # (applied or sent at to_send: together)

    # -- inputs: messages ------------------------------------------------------------------------------

    def handle(self, msg: Any, now: float, *, sender: str | None = None) -> None:
        """Process one replication message (from any node, own ones included). Raises
        StoreDecodeError for a malformed message, and :class:`~broker_mqtt.errors.ForgedMessage`
        when ``sender`` (the endpoint id in hex that the message's topic proves) is given and is not
        the endpoint the message claims to come from (:func:`.replica_messages.sender_of`); the
        state is unchanged either way."""
        self._clock(now)
        message = decode(msg, me=self.id)
        if sender is not None and sender_of(message) != sender:
            raise ForgedMessage(f"a {msg[0]} message from endpoint {sender} claims to be from {sender_of(message)}")
        try:
            _HANDLERS[type(message)](self, message, now)
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise StoreDecodeError(f"bad {msg[0]} message: {exc}") from exc

    def tick(self, now: float, wall: float) -> None:
        """Run due timers: heartbeats, write retries and timeouts, claims, fetches, expiries."""
        self._clock(now)
        if self.tag and self.role is Role.FOLLOWER and now >= self._reclaim_at:
            self._start_claim(now)  # the tag holder is master, or trying to be
        if now >= self._next_hb:
            self._next_hb = now + self.config.heartbeat
            self._send(Heartbeat(self.id, self.epoch, self.role, self._reported()[0], self.master))
        self._writer.tick(now)
        self._pump_writer(now)
        if self._claim is not None:
            self._progress_claim(now)
        if self._fetch_due() and now >= self._fetch_deadline:
            self._request_fetch(self.master, now)  # type: ignore[arg-type]  # _fetch_due: a master
        if self.role is Role.MASTER:
            self._expire(wall, now)
            if self._durable_seq < self.state.last_seq and self.durability is Durability.MASTER:
                self._advance_durable()  # (the spell after a pause has passed: _woke_unconfirmed)
        if self._taking_order:
            self._take_order()
        if self._read_ahead:  # (meanwhile too: chunks owed are read in the order taken before)
            self._step_read_ahead()
        if self._snaps:
            self._stage_pending(now)

    # -- outputs ----------------------------------------------------------------------------------------

    def to_send(self) -> list[list[Any]]:
        """Drain the messages to broadcast, in order. Makes applied state durable first. The writes
        placed since the last call travel together (one ``writes`` message for up to 256), as do the
        records applied since (one ``log`` message for up to 64: each is answered once acknowledged,
        not when the last is), and this replica acknowledges once, the highest it holds."""
        self._pump_writer(self._now)
        self.state.commit()
        if self._out_log:
            out_log, start, writes = self._out_log, 0, 0
            for i, count in enumerate(self._out_writes):
                writes += count
                if writes >= LOG_GROUP or i + 1 - start >= LOG_GROUP or i + 1 == len(out_log) \
                        or out_log[i + 1].epoch != out_log[start].epoch:
                    records = out_log[start:i + 1]
                    epoch = records[0].epoch
                    if epoch == self.epoch:
                        self._note_rounds(records)  # an ack of this message answers its writes
                    # Each under the epoch it was made in, not this replica's now: a master that read
                    # a newer claim after writes (a paused one, woken to both) adopted that epoch
                    # since, and its records sent in it passed every follower's fence, applied among
                    # the new master's at the same seqs. In their own, fenced replicas ignore them.
                    self._send(Log(epoch, records))
                    start, writes = i + 1, 0
            self._out_log, self._out_writes = [], []
            self._advance_durable()
        if self._ack_due and self.epoch is not None and self.master not in (None, self.id):
            if self._verified:  # else: once the master has checked our history (its active, a tail, a snapshot)
                self._send(Ack(self.epoch, self.id, self.state.last_seq))
                self._ack_due = False
        else:
            self._ack_due = False
        out, self._outbox = self._outbox, []
        return out

    def events(self) -> list[ReplicaEvent]:
        """Drain what happened, in order."""
        out, self._events = self._events, []
        return out


_HANDLERS: dict[type, Callable[[Replica, Any, float], None]] = {
    Log: Replica._on_log,
    Ack: Replica._on_ack,
    Write: Replica._on_write_msg,
    Writes: Replica._on_writes_msg,
    WriteAck: Replica._on_wack,
    Heartbeat: Replica._on_hb,
    Claim: Replica._on_claim,
    Promise: Replica._on_promise,
    Fetch: Replica._on_fetch,
    Tail: Replica._on_tail,
    Snap: Replica._on_snap,
    SnapFetch: Replica._on_sfetch,
    SnapChunk: Replica._on_schunk,
    Active: Replica._on_active,
    Resign: Replica._on_resign,
}
