"""The state every part of an elected-store replica shares, and the helpers they all use.

:class:`ReplicaBase` holds one node's replica state (role, epoch, members, the log it keeps for
others, the master's and the writer's bookkeeping, the outbox and the events) and the small steps
every part takes: follow or leave a master, go stale or synced, step down, queue a message. The
parts build on it in one line of classes: :mod:`.replica_claim` (claims and merges),
:mod:`.replica_master` (applying writes, durability, expiry), :mod:`.replica_follower` (following the
log, catching up), and :class:`~.replication.Replica`, the public face (theory of operation there).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .record_log import RecordLog
from .replica_events import (
    DataChanged,
    Durability,
    MasterChanged,
    ReplicaConfig,
    ReplicaEvent,
    ReplicaStatistics,
    Role,
    StaleChanged,
)
from .replica_messages import ReplicationMessage, encode
from .snapshot_stream import Incoming, ReadAhead, SnapshotReader
from .versioned import (
    Change,
    Clock,
    Epoch,
    Lineage,
    Position,
    Record,
    Resolver,
    VersionedState,
    contains,
    last_writer_wins,
)
from .writer_core import WriterCore

__all__ = ["ReplicaBase", "CONFLICTS_KEPT", "MAX_ORIGINS"]

CONFLICTS_KEPT = 100_000  #: conflicts a replica remembers, so that it reports each one once
MAX_ORIGINS = 100_000  #: writers whose endpoint the master remembers, to answer them there


def _always() -> bool:
    return True


@dataclass(slots=True)
class _Member:
    seen: float
    epoch: Epoch | None
    pos: Position
    acked: int = 0  # highest seq acknowledged in the current epoch
    fenced_since: float | None = None  # since when it reports a newer epoch with no master (to a master)


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
    #: the claimant's own unacknowledged tail as a deposed master: its announced lineage, if any
    own_tail: Lineage | None = None
    #: source -> its fetch's answers asked for again, in a row, while it was heard (_progress_claim)
    stalls: dict[str, int] = field(default_factory=dict)

class ReplicaBase:
    """One node's replica state and shared helpers; see :class:`~.replication.Replica`."""

    def __init__(self, name: str, node_id: str, state: VersionedState, now: float, *,
                 durability: Durability | str = Durability.ONE, config: ReplicaConfig | None = None,
                 clock: Clock, resolver: Resolver = last_writer_wins) -> None:
        self.name = name
        self.id = node_id
        self.origin = node_id.split(".", 1)[0]
        self.state = state
        self.durability = Durability(durability)
        self.config = config or ReplicaConfig()
        self.resolver = resolver
        self.clock = clock
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
        # a position whose history holds every history in ``_subsumed`` (a dropped tail's up to its
        # durable point: ``Active.subsumed_at``); None: none known
        self._subsumed_at: Position | None = None
        self._conflicts_seen: set[Epoch] = set()
        self._conflicts_reported: dict[tuple[bytes, frozenset[tuple[int, str]]], None] = {}
        # streamed snapshots (:mod:`.snapshot_stream`): being received, by source; the last one
        # installed from each source (epoch, seq); the key order this node serves them in
        self._snaps: dict[str, Incoming] = {}
        self._snap_done: dict[str, tuple[Epoch, int]] = {}
        self._reader: SnapshotReader | None = None
        # requester -> (epoch, after, since, window): its pass, waiting for the reader's key order
        self._snap_waiting: dict[str, tuple[Epoch, bytes | None, Position | None, int]] = {}
        self._read_ahead: dict[str, ReadAhead] = {}  # requester -> its next window, read before it asks
        self._snap_served_at = -math.inf  # when this replica last served a snapshot's chunks
        self._snap_paused_at = -math.inf  # when it began serving them, after a while without
        # master side
        self._held: dict[str, dict[int, tuple[str, list[Any]]]] = {}
        #: Whether anyone wants data changes: of the records applied, and of a whole-state replacement
        #: (a snapshot installed, a merge). The I/O layer sets it (ElectedStore: an open event stream
        #: wants data). False: no change is built (a joiner's would be one per key; a work queue's
        #: standby reads none).
        self.wants_data: Callable[[], bool] = _always
        self._acked_n: dict[str, int] = {}  # writer -> the last n answered (this mastership)
        self._unacked: dict[str, None] = {}  # the writers with writes applied and not yet answered
        # writer -> (seq, n) of its last write in each log message sent and not yet answered: what
        # an ack short of its latest write answers (see _advance_durable)
        self._rounds: dict[str, deque[tuple[int, int]]] = {}
        # writer -> n -> the answer of each write applied here and not yet answered (see _apply_write)
        self._unanswered: dict[str, dict[int, Any]] = {}
        # writer -> n -> the answer of a repeat, taken when it arrives (see _note_repeat)
        self._repeat_answers: dict[str, dict[int, Any]] = {}
        # writer -> (first, last, n -> answer): one scan of the log for a burst of repeats (_logged_answer)
        self._logged_answers: dict[str, tuple[int, int, dict[int, Any]]] = {}
        self._applied_from: dict[str, int] = {}  # writer -> the first n this mastership applied
        self._sent_upto: dict[str, int] = {}  # writer -> the highest n answered this mastership (never lowered)
        # writer -> since when _determined holds its answers back, and at which write
        self._held_back: dict[str, tuple[float, int]] = {}
        self._origins: dict[str, str] = {}  # writer -> the endpoint its writes came from (for its answers)
        self._out_log: list[Record] = []
        self._out_writes: list[int] = []  # the writes each record of _out_log applies (a batch's: several)
        # writer side
        self._writer = WriterCore(node_id, self.origin, now, write_timeout=self.config.write_timeout,
                                  retry_interval=self.config.retry_interval)
        # output
        self._outbox: list[list[Any]] = []
        self._events: list[ReplicaEvent] = []
        self._ack_due = False
        self.stats = ReplicaStatistics()
        self._verified = False  # our history is known to be a prefix of the master's: apply its log
        self._durable_seq = 0  # as master: the highest durable seq
        self._discard_after: int | None = None  # a deposed master's unacknowledged tail starts after this
        self._next_hb = now
        self._reclaim_at = now
        self._started = now
        self._resumed = now  # the last time this replica woke from a pause (see _clock)
        self._pause_threshold = self.config.pause_threshold  # (once: _clock runs at every input)
        self._now = now

    # -- shared steps ---------------------------------------------------------------------------------

    def _clock(self, now: float) -> None:
        """Note the time of an input. Heartbeats tick every ``heartbeat``, so an input more than
        ``config.pause_threshold`` (``min(member_timeout / 2, claim_timeout - heartbeat)``) after the
        previous one means this process was not running (SIGSTOP, a stalled loop): what it knows of
        the members is stale (by its clock they all look silent), and a claim waits
        ``member_timeout`` from now to hear them again, as one just started does, before it counts
        who is live; a master may have been deposed meanwhile (``_woke_unconfirmed``). The threshold
        is below the shortest pause that can depose a master (:attr:`.ReplicaConfig.pause_threshold`):
        before, ``max(member_timeout / 2, 2 * heartbeat)`` missed a deposing pause when
        ``claim_timeout`` was short of it."""
        if now - self._now > self._pause_threshold:
            self._resumed = now
        self._now = now

    def _drop_unacknowledged_tail(self) -> None:
        """A master that leaves the role (steps down, or claims again: :meth:`_start_claim`)
        announces its history only up to its durable point: the records after it were acknowledged
        to nobody, and are dropped for the next master's snapshot rather than merged over another
        master's acknowledged writes."""
        if self.role is Role.MASTER and self._durable_seq < self.state.last_seq:
            self._discard_after = self._durable_seq

    def _step_down(self) -> None:
        """Stop being master (or claiming). Records past the durable point were acknowledged to
        nobody (with durability "master" only those applied just after a pause: ``_woke_unconfirmed``):
        if the next master's history lacks them, they are dropped for its snapshot rather than merged;
        their writers send them again."""
        self._drop_unacknowledged_tail()
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

    def _fetch_from(self) -> Position | None:
        """The position to fetch a tail from; None (a snapshot) when our tail is to be dropped."""
        if self._discard_after is not None and self._discard_after < self.state.last_seq:
            return None
        return self.state.position

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

    def _data_changed(self, changes: list[Change]) -> None:
        """Report ``changes`` (not empty): added to the last event when that is a DataChanged too, so
        that the records applied together make one event, not one each."""
        events = self._events
        last = events[-1] if events else None
        if type(last) is DataChanged:
            last.changes.extend(changes)
        else:
            events.append(DataChanged(changes))

    def _send(self, msg: ReplicationMessage) -> None:
        """Queue ``msg``, encoded now: it says what holds when it is sent, not when it is drained."""
        self._outbox.append(encode(msg))

    def _snap_ask(self, inc: Incoming, now: float) -> None:
        """Ask for the next window of a snapshot being received (:mod:`.replica_follower`)."""
        raise NotImplementedError

    def _pump_writer(self, now: float) -> None:
        """Route this node's own writes (:mod:`.replica_master`)."""
        raise NotImplementedError
