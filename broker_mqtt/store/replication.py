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
  healed split) it fetches every divergent head and merges (:func:`~.versioned.merge`).
  Then it broadcasts ``active`` and accepts writes. Losing the tag stops it accepting writes at once.
* **Writes.** Every replica is also a writer: write ``n`` of writer ``w`` goes to the master (applied at
  once when this node is the master). The master applies a writer's writes in ``n`` order, exactly once
  (``applied[w]`` travels with the state, so the next master knows it too), appends a :class:`Record`
  to its log and broadcasts it. Replicas apply records in sequence order, make them durable, and
  ``ack``. The master answers ``wack(w, upto)`` once the write is durable per ``durability``:
  ``"master"`` (applied by the master), ``"one"`` (and by at least one other live replica: a store
  with no other replica cannot acknowledge such writes), ``"all"`` (by every live replica, at least
  one). A writer re-sends its
  unanswered writes to every new master and every ``retry_interval``; a write not answered within
  ``write_timeout`` fails with :class:`NoMaster` (its outcome is then unknown).
* **Resync.** A replica that misses records fetches them from the master; one whose history is not a
  prefix of the master's takes a snapshot when the master's ``active`` says its history was merged,
  and otherwise keeps its data and keeps announcing its position, which makes the master merge again.

Nothing here does I/O or reads a clock: the caller passes ``now`` (monotonic seconds) and ``wall``
(wall-clock seconds, for expiries), calls :meth:`tick` at :attr:`next_deadline`, and sends what
:meth:`to_send` returns (wire lists; :mod:`.routes` says which topic, and which endpoint, each goes to).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .backend import _pack
from .commands import WriteCommand, decode_command
from .errors import StoreDecodeError, StoreError
from .record_log import RecordLog
from .replica_events import (
    ConflictsFound,
    DataChanged,
    Durability,
    MasterChanged,
    ReplicaConfig,
    ReplicaEvent,
    ReplicaStats,
    Role,
    StaleChanged,
    WriteDone,
    WriteFailed,
)
from .versioned import (
    Clock,
    Conflict,
    Epoch,
    Lineage,
    Position,
    Record,
    Resolver,
    VersionedState,
    compute_op,
    contains,
    epoch_from_wire,
    last_writer_wins,
    lineage_from_wire,
    lineage_to_wire,
    merge_histories,
    position_from_wire,
    position_to_wire,
)
from .writer_core import NoMaster, WriterCore

__all__ = [
    "Durability",
    "Role",
    "ReplicaConfig",
    "NoMaster",
    "DataChanged",
    "MasterChanged",
    "ConflictsFound",
    "WriteDone",
    "WriteFailed",
    "StaleChanged",
    "ReplicaEvent",
    "ReplicaStats",
    "Replica",
]

CONFLICTS_KEPT = 100_000  #: conflicts a replica remembers, so that it reports each one once
MAX_ORIGINS = 100_000  #: writers whose endpoint the master remembers, to answer them there


@dataclass(slots=True)
class _Member:
    seen: float
    epoch: Epoch | None
    pos: Position
    acked: int = 0  # highest seq acknowledged in the current epoch


@dataclass(slots=True)
class _Claim:
    epoch: Epoch
    deadline: float
    waiting: set[str]
    promises: dict[str, tuple[Position, Lineage, int]]  # node -> (pos, lineage, last_seq)
    fetching: dict[str, float] | None = None  # source -> deadline
    fetched: dict[str, VersionedState] | None = None  # merging: source -> its state
    merge_self: bool = False
    ready: float = 0.0  # not before this time (a new node learns who is there first)
    counted: bool = False


class Replica:
    """One node's replica of elected store ``name``; see the module docstring."""

    def __init__(self, name: str, node_id: str, state: VersionedState, now: float, *,
                 durability: Durability | str = Durability.ONE, config: ReplicaConfig | None = None,
                 resolver: Resolver = last_writer_wins, clock: Clock | None = None) -> None:
        self.name = name
        self.id = node_id
        self.origin = node_id.split(".", 1)[0]
        self.state = state
        self.durability = Durability(durability)
        self.config = config or ReplicaConfig()
        self.resolver = resolver
        self.clock = clock or Clock()
        self.clock.observe(state.max_hlc)
        self.role = Role.FOLLOWER
        self.tag = False
        lineage_epochs = [e for e, _ in state.lineage]
        self.epoch: Epoch | None = max(lineage_epochs) if lineage_epochs else None
        self.max_term = self.epoch[0] if self.epoch else 0
        self.master: str | None = None  # the active master of self.epoch, once known
        self.stale = True
        self._stale_reason = "no master yet"
        self._members: dict[str, _Member] = {}
        self._log = RecordLog(self.config.log_keep)
        self._ahead: dict[int, Record] = {}
        self._fetch_deadline = 0.0
        self._claim: _Claim | None = None
        self._subsumed: list[tuple[Lineage, int]] = []
        self._conflicts_seen: set[Epoch] = set()
        self._conflicts_reported: dict[tuple[bytes, frozenset[tuple[int, str]]], None] = {}
        # master side
        self._held: dict[str, dict[int, tuple[str, list[Any]]]] = {}
        self._acked_n: dict[str, int] = {}
        self._origins: dict[str, str] = {}  # writer -> the endpoint its writes came from (for its answers)
        self._out_log: list[Record] = []
        # writer side
        self._writer = WriterCore(node_id, self.origin, now, write_timeout=self.config.write_timeout,
                                  retry_interval=self.config.retry_interval)
        # output
        self._outbox: list[list[Any]] = []
        self._events: list[ReplicaEvent] = []
        self._ack_due = False
        self.stats = ReplicaStats()
        self._verified = False  # our history is known to be a prefix of the master's: apply its log
        self._durable_seq = 0  # as master: the highest durable seq
        self._discard_after: int | None = None  # a deposed master's unacknowledged tail starts after this
        self._next_hb = now
        self._reclaim_at = now
        self._started = now
        self._now = now

    # -- queries --------------------------------------------------------------------------------------

    @property
    def is_master(self) -> bool:
        return self.role is Role.MASTER

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
            times.append(self._claim.deadline)
            if self._claim.fetching:
                times.extend(self._claim.fetching.values())
        if self._fetch_due():
            times.append(self._fetch_deadline)
        return min(times)

    def members(self) -> list[str]:
        return sorted(self._live_members())

    # -- inputs: election -------------------------------------------------------------------------------

    def tagged(self, now: float) -> None:
        """The election made this node "it": claim mastership (no-op if already master)."""
        self._now = now
        self.tag = True
        if self.role is Role.FOLLOWER:
            self._start_claim(now)

    def untagged(self, now: float) -> None:
        """This node lost the tag: stop accepting writes at once."""
        self._now = now
        self.tag = False
        if self.role is not Role.FOLLOWER:
            was_master = self.role is Role.MASTER
            self._step_down()
            if was_master:
                self._send(["resign", list(self.epoch or (0, "")), position_to_wire(self.state.position)])
            self._set_master(None, "master resigned")

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

    def write(self, command: WriteCommand, now: float) -> int:
        """Queue a write; return its number ``n``, answered later by WriteDone/WriteFailed(n)."""
        if not isinstance(command, WriteCommand):
            raise TypeError(f"not a store write command: {command!r}")
        self._now = now
        n = self._writer.write(command, now)
        self._pump_writer(now)
        return n

    # -- inputs: messages ------------------------------------------------------------------------------

    def handle(self, msg: Any, now: float) -> None:
        """Process one replication message (from any node, own ones included). Raises
        StoreDecodeError for a malformed message (state unchanged)."""
        self._now = now
        if not isinstance(msg, (list, tuple)) or not msg or not isinstance(msg[0], str):
            raise StoreDecodeError(f"a replication message is a list with a kind, got {msg!r:.80}")
        handler = _HANDLERS.get(msg[0])
        if handler is None:
            raise StoreDecodeError(f"unknown replication message kind {msg[0]!r}")
        try:
            handler(self, list(msg[1:]), now)
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise StoreDecodeError(f"bad {msg[0]} message: {exc}") from exc

    def tick(self, now: float, wall: float) -> None:
        """Run due timers: heartbeats, write retries and timeouts, claims, fetches, expiries."""
        self._now = now
        if self.tag and self.role is Role.FOLLOWER and now >= self._reclaim_at:
            self._start_claim(now)  # the tag holder is master, or trying to be
        if now >= self._next_hb:
            self._next_hb = now + self.config.heartbeat
            self._send(["hb", self.id, _ep(self.epoch), self.role.value, position_to_wire(self._reported()[0]),
                        self.master])
        self._writer.tick(now)
        self._pump_writer(now)
        if self._claim is not None:
            self._progress_claim(now)
        if self._fetch_due() and now >= self._fetch_deadline:
            self._request_fetch(self.master, now)  # type: ignore[arg-type]  # _fetch_due: a master
        if self.role is Role.MASTER:
            self._expire(wall, now)

    # -- outputs ----------------------------------------------------------------------------------------

    def to_send(self) -> list[list[Any]]:
        """Drain the messages to broadcast, in order. Makes applied state durable first."""
        self.state.commit()
        if self._out_log:
            for i in range(0, len(self._out_log), 256):
                self._outbox.append(["log", list(self.epoch or (0, "")),
                                     [r.to_wire() for r in self._out_log[i:i + 256]]])
            self._out_log = []
            self._advance_durable()
        if self._ack_due and self.epoch is not None and self.master not in (None, self.id):
            self._outbox.append(["ack", list(self.epoch), self.id, self.state.last_seq])
        self._ack_due = False
        out, self._outbox = self._outbox, []
        return out

    def events(self) -> list[ReplicaEvent]:
        """Drain what happened, in order."""
        out, self._events = self._events, []
        return out

    # -- message handlers -------------------------------------------------------------------------------

    def _on_hb(self, args: list[Any], now: float) -> None:
        node, epoch, role, pos, master = args
        if node == self.id:
            return
        epoch = None if epoch is None else epoch_from_wire(epoch)
        pos = position_from_wire(pos)
        m = self._members.get(node)
        # where its previous heartbeat said it was (none before its first one in this epoch)
        before = m.pos[0] if m is not None and m.epoch == epoch else None
        if m is None:
            m = self._members[node] = _Member(now, epoch, pos)
        m.seen, m.epoch, m.pos = now, epoch, pos
        if epoch is not None:
            self.max_term = max(self.max_term, epoch[0])
        if epoch is not None and (self.epoch is None or epoch > self.epoch):
            # a newer epoch: we missed its claim, or were fenced (a double tag, a paused process)
            self._adopt(epoch, now)
            if role == "master":
                self._set_master(node, "")
                self._request_fetch(node, now)
        elif role == "master" and epoch == self.epoch and self.role is Role.FOLLOWER and self.master is None:
            self._set_master(node, "")  # (re)started, or missed the active: follow, and catch up
            self._request_fetch(node, now)
        elif (role == "master" and epoch == self.epoch and node == self.master and self.role is Role.FOLLOWER
              and before is not None and self.state.last_seq < before and self._verified and not self.stale
              and not self._ahead):
            # The master queues every record its heartbeat counts before its next heartbeat, on the
            # same topic: by this heartbeat we hold every record up to where the previous one said
            # it was, unless records were lost (a partition, a broker that dropped them). With no
            # gap to show for it, nothing else would notice before the next write: catch up now.
            self._mark_stale("catching up: log records were lost")
            self._request_fetch(node, now)
        elif self.role is Role.MASTER and not self._holds(pos):
            self._start_claim(now)  # a diverged history not merged yet: merge it in a new epoch

    def _on_claim(self, args: list[Any], now: float) -> None:
        epoch = epoch_from_wire(args[0])
        self.max_term = max(self.max_term, epoch[0])
        if epoch[1] == self.id or (self.epoch is not None and epoch <= self.epoch):
            return
        self._adopt(epoch, now)
        pos, lineage, last = self._reported()
        self._send(["promise", list(epoch), self.id, position_to_wire(pos), lineage_to_wire(lineage), last])

    def _on_promise(self, args: list[Any], now: float) -> None:
        epoch, node, pos, lineage, last_seq = epoch_from_wire(args[0]), args[1], args[2], args[3], args[4]
        claim = self._claim
        if claim is None or epoch != claim.epoch or claim.fetching is not None:
            return
        claim.promises[node] = (position_from_wire(pos), lineage_from_wire(lineage), int(last_seq))
        claim.waiting.discard(node)
        self._progress_claim(now)

    def _on_fetch(self, args: list[Any], now: float) -> None:
        epoch, requester, source, from_pos = epoch_from_wire(args[0]), args[1], args[2], args[3]
        if source != self.id or requester == self.id:
            return
        if from_pos is None:
            self._send(["snap", list(epoch), requester, self.state.to_wire(), self.id])
            return
        pos = position_from_wire(from_pos)
        if self.role is Role.MASTER and not self._holds(pos):
            self._start_claim(now)  # its history diverged and was never merged: merge it first
            return
        seq = pos[0]
        if self.state.contains(pos) and (seq == self.state.last_seq or self._log.covers(seq, self.state.last_seq)):
            for chunk in self._log.after(seq):
                self._send(["tail", list(epoch), requester, [r.to_wire() for r in chunk], self.state.last_seq,
                            self.id])
        else:
            self._send(["snap", list(epoch), requester, self.state.to_wire(), self.id])

    def _on_tail(self, args: list[Any], now: float) -> None:
        epoch, to, records, upto, source = epoch_from_wire(args[0]), args[1], args[2], args[3], args[4]
        if to != self.id:
            return
        recs = [Record.from_wire(r) for r in records]
        self.stats.records_fetched += len(recs)
        claim = self._claim
        if claim is not None and claim.fetching is not None and epoch == claim.epoch:
            if source in claim.fetching and claim.fetched is None:
                self._apply_records(recs)
                if self.state.last_seq >= upto:
                    claim.fetching.pop(source)
                    self._progress_claim(now)
            return
        if epoch != self.epoch or source != self.master:
            return
        self._verified = True  # the master checked that our history is a prefix of its own
        self._apply_records(recs)
        self._drain_ahead()
        self._check_synced(upto)

    def _on_snap(self, args: list[Any], now: float) -> None:
        epoch, to, wire, source = epoch_from_wire(args[0]), args[1], args[2], args[3]
        if to != self.id:
            return
        parts = VersionedState.parts_from_wire(wire)
        self.stats.snapshots_installed += 1
        self.stats.snapshot_entries += len(parts["versions"])
        claim = self._claim
        if claim is not None and claim.fetching is not None and epoch == claim.epoch:
            if source not in claim.fetching:
                return
            claim.fetching.pop(source)
            if claim.fetched is None:  # one history ahead of ours, too far for a tail
                self._install(parts)
            else:
                remote = VersionedState()
                remote.replace(**parts)
                claim.fetched[source] = remote
            self._progress_claim(now)
            return
        if epoch != self.epoch:
            return
        self._install(parts)
        self._drain_ahead()
        self._check_synced(parts["last_seq"])

    def _on_active(self, args: list[Any], now: float) -> None:
        epoch, pos, lineage, conflicts, subsumed = args[:5]
        epoch = epoch_from_wire(epoch)
        self.max_term = max(self.max_term, epoch[0])
        if epoch[1] == self.id or (self.epoch is not None and epoch < self.epoch):
            return
        if self.role is not Role.FOLLOWER or self.epoch != epoch:
            self._adopt(epoch, now)
        pos, lineage = position_from_wire(pos), lineage_from_wire(lineage)
        self._subsumed = [(lineage_from_wire(lin), int(last)) for lin, last in subsumed]
        self.epoch = epoch
        self._set_master(epoch[1], "")
        if conflicts and epoch not in self._conflicts_seen:
            self._conflicts_seen.add(epoch)
            self._report_conflicts(epoch, [Conflict.from_wire(c) for c in conflicts])
        mine = self.state.position
        if contains(lineage, pos[0], mine):
            self._discard_after = None
            if mine[0] < pos[0]:
                self._mark_stale("catching up")
                self._request_fetch(epoch[1], now)
            else:
                self._verified = True
                self._mark_synced()
        elif contains(lineage, pos[0], self._reported()[0]):
            self._mark_stale("dropping an unacknowledged tail")
            self._request_fetch(epoch[1], now)
        elif any(contains(lin, last, mine) for lin, last in self._subsumed):
            self._mark_stale("taking the merged state")
            self._request_fetch(epoch[1], now)
        else:
            self._mark_stale("history diverged: waiting for the master to merge it")

    def _on_log(self, args: list[Any], now: float) -> None:
        epoch = epoch_from_wire(args[0])
        records = [Record.from_wire(wire) for wire in args[1]]
        if self.epoch is None or epoch > self.epoch:
            self.max_term = max(self.max_term, epoch[0])
            self._adopt(epoch, now)
            self._set_master(epoch[1], "")
            self._request_fetch(epoch[1], now)
            return
        if epoch < self.epoch or self.role is not Role.FOLLOWER:
            return  # fenced: a deposed master's log
        for rec in records:
            if rec.seq > self.state.last_seq:
                self._ahead[rec.seq] = rec
        if not self._verified:
            if len(self._ahead) > self.config.max_held:
                self._ahead.clear()
            return  # applied once a tail or snapshot from the master shows we follow its history
        self._drain_ahead()
        if self._ahead and not self._fetch_deadline:
            self._fetch_deadline = now + self.config.heartbeat  # a gap: fetch unless it fills by then

    def _on_ack(self, args: list[Any], now: float) -> None:
        epoch, node, seq = epoch_from_wire(args[0]), args[1], int(args[2])
        if self.role is not Role.MASTER or epoch != self.epoch:
            return
        m = self._members.get(node)
        if m is None:
            m = self._members[node] = _Member(now, epoch, (seq, epoch))
        m.seen = now
        m.acked = max(m.acked, seq)
        self._advance_durable()

    def _on_write(self, writer: str, n: int, origin: str, cmd: list[Any], now: float) -> None:
        if self.role is not Role.MASTER:
            return
        if self._origins.get(writer) != origin:
            self._origins.pop(writer, None)
            self._origins[writer] = origin
            if len(self._origins) > MAX_ORIGINS:
                del self._origins[next(iter(self._origins))]  # the writer that moved least recently
        done = self.state.applied_n(writer)
        if n <= done:  # a repeat (its answer was lost, or it went to an earlier master): answer again
            self._acked_n[writer] = min(self._acked_n.get(writer, 0), n - 1)
            self._advance_durable()
            return
        if n > done + 1:
            held = self._held.setdefault(writer, {})
            if len(held) < self.config.max_held:
                held[n] = (origin, cmd)
            return
        self._apply_write(writer, n, origin, cmd)
        held = self._held.get(writer)
        while held and (self.state.applied_n(writer) + 1) in held:
            n = self.state.applied_n(writer) + 1
            self._apply_write(writer, n, *held.pop(n))

    def _on_write_msg(self, args: list[Any], now: float) -> None:
        writer, n, origin, cmd, epoch = args
        if writer == self.id:
            return  # own writes are applied directly when this node is master
        if epoch is None or epoch_from_wire(epoch) != self.epoch:
            return  # sent to another mastership (a late arrival after a split): its writer re-sends
        self._on_write(writer, int(n), origin, cmd, now)

    def _on_wack(self, args: list[Any], now: float) -> None:
        epoch, writer, upto, results = epoch_from_wire(args[0]), args[1], int(args[2]), args[3]
        if writer != self.id or (self.epoch is not None and epoch < self.epoch):
            return
        self._writer.answered(upto, {int(n): r for n, r in results})
        self._collect_answers()

    def _on_resign(self, args: list[Any], now: float) -> None:
        epoch = epoch_from_wire(args[0])
        if epoch == self.epoch and self.master == epoch[1]:
            self._set_master(None, "master resigned")

    # -- claims ------------------------------------------------------------------------------------------

    def _start_claim(self, now: float) -> None:
        self.max_term = max(self.max_term, self.epoch[0] if self.epoch else 0)
        self.max_term += 1
        epoch = (self.max_term, self.id)
        self.stats.claims += 1
        self.role = Role.CLAIMING
        self.epoch = epoch
        self._set_master(None, "electing a master")
        live = set(self._live_members())
        # a node that just started waits until it has heard the others' heartbeats
        ready = max(now, self._started + self.config.member_timeout)
        self._claim = _Claim(epoch, max(now + self.config.claim_timeout, ready), live, {}, ready=ready)
        self._send(["claim", list(epoch), position_to_wire(self.state.position)])
        self._progress_claim(now)

    def _progress_claim(self, now: float) -> None:
        claim = self._claim
        if claim is None or self.role is not Role.CLAIMING:
            return
        if claim.fetching is None:
            if now < claim.ready:
                return
            if not claim.counted:  # now we know who is there: wait for their promises too
                claim.counted = True
                claim.waiting |= set(self._live_members()) - set(claim.promises)
            if claim.waiting and now < claim.deadline:
                return
            self._choose_sources(claim, now)
            return
        for source, deadline in list(claim.fetching.items()):
            if now >= deadline:  # the source went away: start over with whoever is left
                self._members.pop(source, None)
                self._start_claim(now)
                return
        if not claim.fetching:
            self._finish_claim(claim, now)

    def _choose_sources(self, claim: _Claim, now: float) -> None:
        """Promises are in: find the most advanced histories (those no other history contains)."""
        heads = {self.id: self._reported(), **claim.promises}
        maximal: dict[Position, str] = {}
        for node in [self.id, *sorted(claim.promises)]:
            pos = heads[node][0]
            if not any(opos != pos and contains(olin, olast, pos) for opos, olin, olast in heads.values()):
                maximal.setdefault(pos, node)
        sources = sorted(n for n in maximal.values() if n != self.id)
        claim.waiting.clear()
        claim.fetching = {s: now + self.config.fetch_timeout for s in sources}
        if len(maximal) == 1:  # one history at least as advanced as all: its tail (or a snapshot)
            for s in sources:
                self._send(["fetch", list(claim.epoch), self.id, s, self._fetch_from()])
        else:  # diverged histories (a healed split): take them all, and merge
            claim.fetched = {}
            claim.merge_self = self.id in maximal.values()
            for s in sources:
                self._send(["fetch", list(claim.epoch), self.id, s, None])  # None: a snapshot
        self._progress_claim(now)

    def _report_conflicts(self, epoch: Epoch, conflicts: list[Conflict]) -> None:
        """Report each conflict once: a history merged again (a second claimant that had not
        seen the first merge) yields the same pairs of versions, which are not news."""
        seen = self._conflicts_reported
        fresh = []
        for c in conflicts:
            ident = (_pack(c.key), frozenset({(c.chosen.hlc, c.chosen.origin), (c.other.hlc, c.other.origin)}))
            if ident not in seen:
                seen[ident] = None
                fresh.append(c)
        while len(seen) > CONFLICTS_KEPT:
            del seen[next(iter(seen))]
        if fresh:
            self._events.append(ConflictsFound(epoch, fresh))

    def _finish_claim(self, claim: _Claim, now: float) -> None:
        conflicts: list[Conflict] = []
        subsumed: list[tuple[Lineage, int]] = []
        if claim.fetched:  # diverged histories: merge them all into a new line of this epoch
            states = [*([self.state] if claim.merge_self else []), *(claim.fetched[s] for s in sorted(claim.fetched))]
            # the merged histories, as they were: followers at any of their positions take the merge
            subsumed = [(list(s.lineage), s.last_seq) for s in states]
            parts, conflicts = merge_histories(states, claim.epoch, resolver=self.resolver)
            changes = self.state.replace(**parts)
            self.clock.observe(self.state.max_hlc)
            self._log.clear()
            if changes:
                self._events.append(DataChanged(changes))
        self._claim = None
        self.role = Role.MASTER
        self._verified = True
        self._discard_after = None
        self._durable_seq = self.state.last_seq  # what we took over counts as acknowledged
        self.stats.masterships += 1
        self.stats.merges += bool(claim.fetched)
        self._subsumed = subsumed or self._subsumed
        for m in self._members.values():
            m.acked = 0
        self._acked_n = {}
        self._send(["active", list(claim.epoch), position_to_wire(self.state.position),
                    lineage_to_wire(self.state.lineage), [c.to_wire() for c in conflicts],
                    [[lineage_to_wire(lin), last] for lin, last in self._subsumed]])
        if conflicts:
            self._conflicts_seen.add(claim.epoch)
            self._report_conflicts(claim.epoch, conflicts)
        self._set_master(self.id, "")
        self._mark_synced()

    # -- master: applying writes --------------------------------------------------------------------------

    def _apply_write(self, writer: str, n: int, origin: str, cmd_wire: list[Any]) -> None:
        wall = self.clock.now() / 1_000_000
        result: Any = None
        try:
            cmd = decode_command(cmd_wire)
            op, result = compute_op(self.state, cmd, wall)  # type: ignore[arg-type]
        except StoreError as exc:
            op, result = ("noop",), ["error", *exc.to_wire()]
        self._append(Record(self.state.last_seq + 1, self.epoch, self.clock.now(), origin, writer, n, op,  # type: ignore[arg-type]
                            result))
        self._acked_n.setdefault(writer, 0)

    def _append(self, record: Record) -> None:
        changes = self.state.apply(record)
        self.stats.records_applied += 1
        self._log.append(record)
        self._out_log.append(record)
        if changes:
            self._events.append(DataChanged(changes))

    def _expire(self, wall: float, now: float) -> None:
        while True:
            nxt = self.state.next_expiry()
            if nxt is None or nxt[0] > wall:
                return
            self._append(Record(self.state.last_seq + 1, self.epoch, self.clock.now(), self.origin,  # type: ignore[arg-type]
                                "$expiry", 0, ("expire", nxt[1])))

    def _advance_durable(self) -> None:
        if self.role is not Role.MASTER:
            return
        last = self.state.last_seq
        if self.durability is Durability.MASTER:
            durable = last
        else:
            acks = [m.acked for m in self._live_members().values()]
            if not acks:
                durable = self._durable_seq  # no other live replica: nothing more is durable
            elif self.durability is Durability.ONE:
                durable = max(acks)
            else:
                durable = min(acks)
        self._durable_seq = max(self._durable_seq, durable)
        members: dict[str, _Member] | None = None
        for writer, acked in list(self._acked_n.items()):
            a = self.state.applied.get(writer)
            if a is None or a.n <= acked or a.seq > durable:
                continue
            self._acked_n[writer] = a.n
            results = [[n, r] for n, r in a.results.items() if acked < n <= a.n]
            if writer == self.id:
                self._writer.answered(a.n, dict(results))
                self._collect_answers()
            else:
                msg = ["wack", list(self.epoch or (0, "")), writer, a.n, results]
                if members is None:
                    members = self._live_members()
                origin = self._origins.get(writer)
                if writer not in members and origin is not None:
                    msg.append(origin)  # a writer without a replica: answered at its endpoint only
                self._send(msg)

    # -- writer side -----------------------------------------------------------------------------------

    def _pump_writer(self, now: float) -> None:
        """Route this node's own writes: applied here when master, else sent to the master."""
        for msg in self._writer.to_send():
            if self.role is Role.MASTER:
                self._on_write(self.id, msg[2], msg[3], msg[4], now)
            elif self.role is Role.FOLLOWER and self.master is not None:
                self._send(msg)
            # else: held by the writer until the next master
        self._collect_answers()

    def _collect_answers(self) -> None:
        for n, result in self._writer.answers():
            if isinstance(result, NoMaster) and self.role is Role.MASTER and not self._live_members():
                result = NoMaster(f"store {self.name!r}: write {n} not acknowledged: this node is master but no "
                                  f"other replica is live to confirm it (durability {self.durability.value!r}; a "
                                  f"single node needs durability='master'; outcome unknown)")
            if isinstance(result, StoreError):
                self._events.append(WriteFailed(n, result))
            else:
                self._events.append(WriteDone(n, result))

    # -- follower side ---------------------------------------------------------------------------------

    def _step_down(self) -> None:
        """Stop being master (or claiming). Records past the durable point were acknowledged to
        nobody (unless durability is "master"): if the next master's history lacks them, they are
        dropped for its snapshot rather than merged; their writers send them again."""
        if self.role is Role.MASTER and self.durability is not Durability.MASTER \
                and self._durable_seq < self.state.last_seq:
            self._discard_after = self._durable_seq
        self.role = Role.FOLLOWER
        self._claim = None
        self._held.clear()
        self._verified = False

    def _reported(self) -> tuple[Position, Lineage, int]:
        """Our history as we announce it: without a deposed master's unacknowledged tail."""
        d = self._discard_after
        if d is None or d >= self.state.last_seq:
            return self.state.position, self.state.lineage, self.state.last_seq
        lineage = [(e, f) for e, f in self.state.lineage if f <= d]
        return (d, self.state.epoch_at(d)), lineage, d

    def _fetch_from(self) -> list[Any] | None:
        """The position to fetch a tail from; None (a snapshot) when our tail is to be dropped."""
        if self._discard_after is not None and self._discard_after < self.state.last_seq:
            return None
        return position_to_wire(self.state.position)

    def _adopt(self, epoch: Epoch, now: float) -> None:
        """Follow the newer ``epoch``. A tagged node claims again after ``claim_timeout`` (two nodes
        hold the tag until the election settles: each claim supersedes, and merges, the other)."""
        if self.role is not Role.FOLLOWER:
            self._step_down()
        self._verified = False
        self._reclaim_at = now + self.config.claim_timeout
        self.epoch = epoch
        self._ahead.clear()
        self._set_master(None, "electing a master")

    def _apply_records(self, records: list[Record]) -> None:
        for rec in records:
            if rec.seq == self.state.last_seq + 1:
                self.clock.observe(rec.hlc)
                changes = self.state.apply(rec)
                self.stats.records_applied += 1
                self._log.append(rec)
                self._ack_due = True
                if changes:
                    self._events.append(DataChanged(changes))

    def _drain_ahead(self) -> None:
        while self._ahead:
            rec = self._ahead.pop(self.state.last_seq + 1, None)
            if rec is None:
                for seq in [s for s in self._ahead if s <= self.state.last_seq]:
                    del self._ahead[seq]
                break
            self._apply_records([rec])
        if not self._ahead:
            self._fetch_deadline = 0.0 if not self.stale else self._fetch_deadline

    def _install(self, parts: dict[str, Any]) -> None:
        self._discard_after = None
        self._verified = True
        changes = self.state.replace(**parts)
        self.clock.observe(self.state.max_hlc)
        self._log.clear()
        self._ack_due = True
        if changes:
            self._events.append(DataChanged(changes))

    def _request_fetch(self, source: str, now: float) -> None:
        self._fetch_deadline = now + self.config.fetch_timeout
        self._send(["fetch", _ep(self.epoch), self.id, source, self._fetch_from()])

    def _check_synced(self, upto: int) -> None:
        if self.state.last_seq >= upto and not self._ahead:
            self._fetch_deadline = 0.0
            self._mark_synced()

    # -- helpers ---------------------------------------------------------------------------------------

    def _fetch_due(self) -> bool:
        """A fetch from the master is pending (records missing, or a resync not answered yet)."""
        return bool((self._ahead or self.stale) and self.master not in (None, self.id) and self._fetch_deadline)

    def _holds(self, pos: Position) -> bool:
        return self.state.contains(pos) or any(contains(lin, last, pos) for lin, last in self._subsumed)

    def _live_members(self) -> dict[str, _Member]:
        horizon = self._now - self.config.member_timeout
        return {n: m for n, m in self._members.items() if m.seen >= horizon}

    def _set_master(self, master: str | None, reason: str) -> None:
        if master != self.master:
            self.master = master
            self._events.append(MasterChanged(master, self.epoch if master is not None else None))
        if master is None:
            self._writer.clear_master()
            self._mark_stale(reason)
        elif self.epoch is not None:
            self._writer.set_master(self.epoch, master, self._now)
            self._pump_writer(self._now)

    def _mark_stale(self, reason: str) -> None:
        if not self.stale:
            self.stale = True
            self._events.append(StaleChanged(True, reason))
        self._stale_reason = reason

    def _mark_synced(self) -> None:
        if self.stale:
            self.stale = False
            self._events.append(StaleChanged(False, ""))
            self._ack_due = True

    def _send(self, msg: list[Any]) -> None:
        self._outbox.append(msg)


def _ep(epoch: Epoch | None) -> list[Any] | None:
    return None if epoch is None else list(epoch)


_HANDLERS = {
    "hb": Replica._on_hb,
    "claim": Replica._on_claim,
    "promise": Replica._on_promise,
    "fetch": Replica._on_fetch,
    "tail": Replica._on_tail,
    "snap": Replica._on_snap,
    "active": Replica._on_active,
    "log": Replica._on_log,
    "ack": Replica._on_ack,
    "write": Replica._on_write_msg,
    "wack": Replica._on_wack,
    "resign": Replica._on_resign,
}
