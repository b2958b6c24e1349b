"""The follower side of an elected-store replica: following the master's log, catching up (``docs/elected-stores.md``).

A follower learns the master from heartbeats and ``active``; applies log records in sequence order
once a tail or snapshot from the master shows its history is a prefix of the master's (records that
arrive early wait in ``_ahead``); fetches what it misses (a gap, lost records, a newer epoch); takes a
snapshot when its history was merged or its unacknowledged tail must go; and answers its own writer
on ``wack``.
"""

from __future__ import annotations

from typing import Any

from .errors import StoreDecodeError
from .replica_base import _Member
from .replica_events import DataChanged, Role
from .replica_master import MasterSide
from .replica_messages import (
    Active,
    Fetch,
    Heartbeat,
    Log,
    Resign,
    Snap,
    SnapChunk,
    SnapFetch,
    Tail,
    WriteAck,
)
from .snapshot_stream import Incoming
from .versioned import (
    Record,
    VersionedState,
    contains,
)

__all__ = ["FollowerSide", "TERM_LIMIT"]

#: a member's reported term at or past which the master does not claim above it (a hostile member's
#: huge term: the claim's term stays an int of 9 bytes at most)
TERM_LIMIT = 1 << 62


class FollowerSide(MasterSide):
    """Heartbeats, ``active``, ``log``, ``tail``, ``snap``, ``wack``, ``resign``; catching up."""

    def _on_hb(self, msg: Heartbeat, now: float) -> None:
        node, epoch, role, pos = msg.node, msg.epoch, msg.role, msg.pos
        if node == self.id:
            return
        m = self._members.get(node)
        # where its previous heartbeat said it was (none before its first one in this epoch)
        before = m.pos[0] if m is not None and m.epoch == epoch else None
        if m is None:
            m = self._members[node] = _Member(now, epoch, pos)
        m.seen, m.epoch, m.pos = now, epoch, pos
        if self.role is Role.MASTER and epoch == self.epoch and msg.master == self.id and pos[0] > m.acked \
                and self.state.contains(pos):
            # What it holds, durably (a replica commits before it sends), where this master's history
            # agrees (the same epoch at that seq: the same records up to it): an ack lost on the way
            # (a broker that dropped it) is made up for by its next heartbeat, where the write it
            # answers waited for its timeout, to fail with "outcome unknown"
            m.acked = pos[0]
            self._advance_durable()
        # Only an epoch's own master vouches for it: a heartbeat names its sender (the topic proves
        # that), not the master of the epoch it reports, so another node's epoch in it is hearsay. A
        # member that reported a huge epoch of another node's would fence every replica (issue 19);
        # the master's own heartbeats tell a replica that missed a claim all it needs.
        vouched = epoch if epoch is not None and epoch[1] == node else None
        if vouched is not None:
            self.max_term = max(self.max_term, vouched[0])
        if vouched is not None and (self.epoch is None or vouched > self.epoch):
            # a newer epoch: we missed its claim, or were fenced (a double tag, a paused process)
            self._adopt(vouched, now)
            if role is Role.MASTER:
                self._set_master(node, "")
                self._request_fetch(node, now)
        elif role is Role.MASTER and epoch == self.epoch and self.role is Role.FOLLOWER and self.master is None:
            self._set_master(node, "")  # (re)started, or missed the active: follow, and catch up
            self._request_fetch(node, now)
        elif (role is Role.MASTER and epoch == self.epoch and node == self.master and self.role is Role.FOLLOWER
              and before is not None and self.state.last_seq < before and self._verified and not self.stale
              and not self._ahead):
            # The master queues every record its heartbeat counts before its next heartbeat, on the
            # same topic: by this heartbeat we hold every record up to where the previous one said
            # it was, unless records were lost (a partition, a broker that dropped them). With no
            # gap to show for it, nothing else would notice before the next write: catch up now.
            self._mark_stale("catching up: log records were lost")
            self._request_fetch(node, now)
        elif self.role is Role.MASTER and self._fenced_for_good(m, msg, now):
            # A member fenced by a claim this master never heard, whose claimant is gone (it died as
            # it sent it, say): it ignores this master's epoch and follows none. The tag holder
            # claims again above that epoch, so that it takes part again. (Claiming is always safe,
            # what an election does; a hostile member can report such an epoch, and can claim too.)
            self.max_term = max(self.max_term, msg.epoch[0])  # type: ignore[index]  # _fenced_for_good: an epoch
            self._start_claim(now)
        elif self.role is Role.MASTER and not self._holds(pos):
            self._start_claim(now)  # a diverged history not merged yet: merge it in a new epoch (what
            # it alone holds is not merged: _start_claim drops its unacknowledged tail, as if deposed)

    def _fenced_for_good(self, m: _Member, msg: Heartbeat, now: float) -> bool:
        """The master holds the tag, and member ``m`` has reported a newer epoch than this master's,
        following no master in it, for ``claim_timeout + member_timeout`` (longer than a live
        claimant takes to announce itself) in heartbeats up to ``msg``."""
        epoch = msg.epoch
        if not (self.tag and msg.master is None and epoch is not None and self.epoch is not None
                and epoch > self.epoch and epoch[0] < TERM_LIMIT):
            m.fenced_since = None
            return False
        if m.fenced_since is None:
            m.fenced_since = now
        return now - m.fenced_since >= self.config.claim_timeout + self.config.member_timeout

    def _on_tail(self, msg: Tail, now: float) -> None:
        epoch, upto, source = msg.epoch, msg.upto, msg.source
        if msg.to != self.id:
            return
        recs = msg.records
        self.stats.records_fetched += len(recs)
        claim = self._claim
        if claim is not None and claim.fetching is not None and epoch == claim.epoch:
            if source in claim.fetching and claim.fetched is None:
                claim.stalls.pop(source, None)
                claim.fetching[source] = now + self.config.fetch_timeout  # (a long tail: it moves)
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

    def _on_snap(self, msg: Snap, now: float) -> None:
        """A whole state in one message (a source from before streamed snapshots)."""
        if msg.to != self.id:
            return
        self._take_snapshot(VersionedState.parts_from_wire(msg.snapshot), msg.epoch, msg.source, now)

    def _on_schunk(self, msg: SnapChunk, now: float) -> None:
        """A chunk of a streamed snapshot (:mod:`.snapshot_stream`): staged; the final burst installs it."""
        if msg.to != self.id:
            return
        source, claim = msg.source, self._claim
        for_claim = (claim is not None and claim.fetching is not None and msg.epoch == claim.epoch
                     and source in claim.fetching)
        if not for_claim and (msg.epoch != self.epoch or source != self.master or self.role is not Role.FOLLOWER):
            return
        inc = self._snaps.get(source)
        if inc is not None and inc.epoch != msg.epoch:
            del self._snaps[source]
            inc = None
        if inc is None:
            # a new snapshot: only a fetch's answer (from the first key, every entry) while we wait for
            # one, and not the repeat of one we installed already (a fetch sent again while it came)
            if msg.after is not None or msg.since is not None or msg.pos is None:
                return
            if not for_claim and not self._fetch_deadline:
                return
            done = self._snap_done.get(source)
            if done is not None and done[0] == msg.epoch and msg.pos[0] <= done[1]:
                return
            # staged in this state's file as it comes (a state on disk: there only): a follower's
            # snapshot, and a claim's of the one history that holds all others, installed as a
            # follower's is; a claim's of diverged histories is merged, not installed: in memory
            installs = not for_claim or (claim is not None and claim.fetched is None)
            # those of another epoch are stale (a follower's before this claim, a claim's before this
            # epoch): dropped, as this one's staging supersedes theirs (a state on disk failed their
            # chunks still to stage as malformed)
            self._snaps = {s: i for s, i in self._snaps.items() if i.epoch == msg.epoch}
            inc = self._snaps[source] = Incoming(source, msg.epoch, for_claim, asked=(None, None),
                                                 file=self.state if installs else None)
        if not inc.matches(msg.after, msg.since):
            # a chunk was lost before this one (it starts past what we hold): ask from what we hold;
            # anything else is a repeat of what we have
            if (msg.since == inc.since and msg.after is not None and (inc.cursor is None or msg.after > inc.cursor)
                    and inc.asked != (inc.cursor, inc.since)):
                self._snap_ask(inc, now)
            return
        self._snap_alive(inc, now)
        if msg.pos is None:  # the source's history no longer holds our pass's start: start over
            inc.restart()
            self._snap_ask(inc, now)
            return
        try:
            if msg.final:
                inc.stage(msg.entries, msg.applied)
            else:
                inc.take(msg.entries, msg.next, msg.pos)
        except StoreDecodeError:
            del self._snaps[source]  # a malformed chunk: the fetch starts over (when it is due)
            raise
        if not msg.final:
            if msg.next is None:
                inc.next_pass()  # next: what changed while this pass ran
                self._snap_ask(inc, now)
            elif inc.may_ask():
                self._snap_ask(inc, now)  # (else once the chunks held are staged: _stage_pending)
            return
        if msg.header is None:
            return
        del self._snaps[source]
        # a malformed writer row raises StoreDecodeError (the state unchanged): the fetch starts over
        self._take_snapshot(inc.parts(msg.header), msg.epoch, source, now)
        self._snap_done[source] = (msg.epoch, msg.header[0])

    @property
    def _staging_pending(self) -> bool:
        """A snapshot being received has chunks taken and not yet staged (:meth:`_stage_pending`)."""
        return any(inc.pending for inc in self._snaps.values())

    def _stage_pending(self, now: float) -> None:
        """Stage one chunk taken of a snapshot being received (the timers run a step at a time while
        one is pending), and ask for the next window once few are left. A malformed entry drops the
        snapshot (counted in ``stats.malformed``): the fetch starts over when it is due."""
        for source, inc in self._snaps.items():
            if not inc.pending:
                continue
            try:
                inc.step()
            except StoreDecodeError:
                del self._snaps[source]
                self.stats.malformed += 1
                return
            if inc.for_claim and self._claim is not None:
                self._claim.stalls.pop(source, None)  # it moves (_progress_claim)
            self._snap_alive(inc, now)
            if inc.may_ask():
                self._snap_ask(inc, now)
            return

    def _snap_ask(self, inc: Incoming, now: float) -> None:
        inc.asked, inc.left = (inc.cursor, inc.since), self.config.snapshot_window
        self._send(SnapFetch(inc.epoch, self.id, inc.source, inc.cursor, inc.since, self.config.snapshot_window))
        self._snap_alive(inc, now)

    def _snap_alive(self, inc: Incoming, now: float) -> None:
        """The snapshot moves: its fetch is not overdue (a stalled one is asked again, from what we hold)."""
        if inc.for_claim:
            claim = self._claim
            if claim is not None and claim.fetching is not None and inc.source in claim.fetching:
                claim.fetching[inc.source] = now + self.config.fetch_timeout
        else:
            self._fetch_deadline = now + self.config.fetch_timeout

    def _take_snapshot(self, parts: dict[str, Any], epoch: Any, source: str, now: float) -> None:
        # (None: staged in a state on disk, which counts what it took)
        entries = -1 if parts["entries"] is None else len(parts["entries"])
        claim = self._claim
        if claim is not None and claim.fetching is not None and epoch == claim.epoch:
            if source not in claim.fetching:
                return
            if claim.fetched is None:  # one history ahead of ours, too far for a tail
                self._install(parts)
                entries = self._installed(entries)
            else:
                remote = VersionedState()
                remote.adopt(**parts, report=False)  # merged later; its changes are not ours
                claim.fetched[source] = remote
            claim.fetching.pop(source)  # (after: a malformed snapshot leaves the claim waiting for it)
            self._count_snapshot(entries)
            self._progress_claim(now)
            return
        if epoch != self.epoch:
            return
        self._install(parts)
        self._count_snapshot(self._installed(entries))
        self._drain_ahead()
        self._check_synced(parts["last_seq"])

    def _installed(self, entries: int) -> int:
        """The entries a snapshot just installed counted: ``entries`` as decoded, or (-1: staged in a
        state on disk, which counts what it took) what the state now holds, tombstones included."""
        return entries if entries >= 0 else len(self.state) + self.state.tombstones

    def _on_active(self, msg: Active, now: float) -> None:
        epoch, pos, lineage, conflicts = msg.epoch, msg.pos, msg.lineage, msg.conflicts
        self.max_term = max(self.max_term, epoch[0])
        if epoch[1] == self.id or (self.epoch is not None and epoch < self.epoch):
            return
        if self.role is not Role.FOLLOWER or self.epoch != epoch:
            self._adopt(epoch, now)
        self._subsumed = list(msg.subsumed)
        self._subsumed_at = msg.subsumed_at
        self.epoch = epoch
        self._set_master(epoch[1], "")
        if conflicts and epoch not in self._conflicts_seen:
            self._conflicts_seen.add(epoch)
            self._report_conflicts(epoch, conflicts)
        mine = self.state.position
        if mine[1] == epoch and self.state.contains(pos):
            # a late repeat (a backlog, a redelivery): we hold this master's records, past its start.
            # Not yet checked against its history (restarted from our file): the master checks it (a
            # tail, a snapshot, or a claim that merges it), where the last branch waited for a claim
            if not self._verified:
                self._mark_stale("catching up")
                self._request_fetch(epoch[1], now)
            return
        if contains(lineage, pos[0], mine):
            self._discard_after = None
            if mine[0] < pos[0]:
                self._mark_stale("catching up")
                self._request_fetch(epoch[1], now)
            else:
                self._verified = True
                self._ack_due = True  # (what it holds: its acks waited for this check)
                self._mark_synced()
        elif contains(lineage, pos[0], self._reported()[0]):
            self._mark_stale("dropping an unacknowledged tail")
            self._request_fetch(epoch[1], now)
        elif any(contains(lin, last, mine) for lin, last in self._subsumed):
            self._mark_stale("taking the merged state")
            self._request_fetch(epoch[1], now)
        else:
            self._mark_stale("history diverged: waiting for the master to merge it")

    def _on_log(self, msg: Log, now: float) -> None:
        epoch, records = msg.epoch, msg.records
        if self.epoch is None or epoch > self.epoch:
            self.max_term = max(self.max_term, epoch[0])
            self._adopt(epoch, now)
            self._set_master(epoch[1], "")
            self._request_fetch(epoch[1], now)
            return
        if epoch < self.epoch or self.role is not Role.FOLLOWER:
            return  # fenced: a deposed master's log
        if self._verified and not self._ahead and records and records[0].seq == self.state.last_seq + 1:
            # the usual case: the next records, in order, and none waiting: applied as they come
            self._apply_records(records)
            if self.state.last_seq == records[-1].seq:
                if not self.stale:
                    self._fetch_deadline = 0.0  # as _drain_ahead does once nothing waits
                return
            records = [rec for rec in records if rec.seq > self.state.last_seq]  # out of order: as below
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

    def _on_wack(self, msg: WriteAck, now: float) -> None:
        if msg.writer != self.id or (self.epoch is not None and msg.epoch < self.epoch):
            return
        self.stats.answers_lost += self._writer.answered(msg.upto, msg.results, msg.after, now)
        self._collect_answers()

    def _on_resign(self, msg: Resign, now: float) -> None:
        epoch = msg.epoch
        if epoch == self.epoch and self.master == epoch[1] and epoch[1] != self.id:
            self._set_master(None, "master resigned")  # (not this node's: a master resigns by itself)

    def _apply_records(self, records: list[Record]) -> None:
        report = self.wants_data()
        for rec in records:
            if rec.seq == self.state.last_seq + 1:
                self.clock.observe(rec.hlc)
                changes = self.state.apply(rec, report=report)
                self.stats.records_applied += 1
                self._log.append(rec)
                self._ack_due = True
                if changes:
                    self._data_changed(changes)

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

    def _count_snapshot(self, entries: int) -> None:
        self.stats.snapshots_installed += 1
        self.stats.snapshot_entries += entries

    def _install(self, parts: dict[str, Any]) -> None:
        # first: raises StoreDecodeError with nothing changed
        changes = self.state.adopt(**parts, report=self.wants_data())
        self._discard_after = None
        self._verified = True
        self.clock.observe(self.state.max_hlc)
        self._log.clear()
        self._ack_due = True
        if changes:
            self._events.append(DataChanged(changes))

    def _request_fetch(self, source: str, now: float) -> None:
        self._fetch_deadline = now + self.config.fetch_timeout
        self._snaps = {s: inc for s, inc in self._snaps.items() if inc.epoch == self.epoch}
        inc = self._snaps.get(source)
        if inc is not None and not inc.for_claim:
            self._snap_ask(inc, now)  # a snapshot on its way from there: resume it from what we hold
            return
        self._send(Fetch(self.epoch, self.id, source, self._fetch_from()))

    def _check_synced(self, upto: int) -> None:
        if self.state.last_seq >= upto and not self._ahead:
            self._fetch_deadline = 0.0
            self._mark_synced()
