"""Claiming mastership of an elected store, and merging diverged histories (``docs/elected-stores.md``).

The tagged node picks the epoch ``(highest term seen + 1, its id)`` and broadcasts ``claim``; every
replica that has seen no higher epoch adopts it (the fence) and answers ``promise`` with its position
and lineage. Once every live member promised (or ``claim_timeout`` passed) the claimant takes the most
advanced histories: one that contains all others is fetched as a tail or snapshot (nothing when it is
its own); several that diverged (a healed split) are fetched as snapshots and merged
(:func:`~.state_merge.merge_histories`), each conflict reported once. Then it broadcasts ``active``.
"""

from __future__ import annotations

from .packing import pack
from .replica_base import CONFLICTS_KEPT, ReplicaBase, _Claim
from .replica_events import ConflictsFound, DataChanged, ResolverRefused, Role
from .replica_messages import Active, Claim, Fetch, Promise
from .state_merge import merge_histories
from .versioned import (
    Conflict,
    Epoch,
    Lineage,
    Position,
    contains,
)

__all__ = ["ClaimSide"]

UNBOUNDED_SEQ = 2**62  # an unacknowledged tail's end: any seq of its epoch past the announced end
SUBSUMED_KEPT = 64  # subsumed histories announced (oldest forgotten first)
CLAIM_FETCH_RETRIES = 3  # a claim's fetch asked again, in a row with nothing coming, before it starts over


class ClaimSide(ReplicaBase):
    """Claims: ``claim`` and ``promise`` messages, choosing sources, finishing (merging) a claim."""

    def _on_claim(self, msg: Claim, now: float) -> None:
        epoch = msg.epoch
        self.max_term = max(self.max_term, epoch[0])
        if epoch[1] == self.id or (self.epoch is not None and epoch <= self.epoch):
            return
        self._adopt(epoch, now)
        pos, lineage, last = self._reported()
        self._send(Promise(epoch, self.id, pos, lineage, last))

    def _on_promise(self, msg: Promise, now: float) -> None:
        claim = self._claim
        if claim is None or msg.epoch != claim.epoch or claim.fetching is not None:
            return
        claim.promises[msg.node] = (msg.pos, msg.lineage, msg.last_seq)
        claim.waiting.discard(msg.node)
        self._progress_claim(now)

    def _start_claim(self, now: float) -> None:
        # A master claiming again (to merge a diverged history, or above a member fenced by a claimant
        # that is gone) announces its history up to its durable point, as a deposed one does: if another
        # claim supersedes this one, the adoption steps down a claimant, not a master, and would not
        # drop the tail (test_replica_cluster_order: a master woken from a pause claimed above a dead
        # claimant's epoch, lost to the claim that had deposed it, and its tail was merged)
        self._drop_unacknowledged_tail()
        self.max_term = max(self.max_term, self.epoch[0] if self.epoch else 0)
        self.max_term += 1
        epoch = (self.max_term, self.id)
        self.stats.claims += 1
        self.role = Role.CLAIMING
        self.epoch = epoch
        self._set_master(None, "electing a master")
        live = set(self._live_members())
        # a node that just started waits until it has heard the others' heartbeats (one that just
        # woke from a pause too: _progress_claim)
        ready = max(now, self._started + self.config.member_timeout)
        self._claim = _Claim(epoch, max(now + self.config.claim_timeout, ready), live, {}, ready=ready)
        if self._discard_after is not None and self._discard_after < self.state.last_seq:
            lineage = self._reported()[1]  # (taken now: a snapshot installed for the claim forgets it)
            d = self._discard_after
            # its own epoch past the durable point: also when no record of it was durable (the
            # announced lineage, cut there, then ends in an older master's epoch: a review's case)
            mine = [(e, f) for e, f in self.state.lineage if f > d and e[1] == self.id][:1]
            if mine or (lineage and lineage[-1][0][1] == self.id):
                self._claim.own_tail = [*lineage, *mine]
        self._send(Claim(epoch, self.state.position))
        self._progress_claim(now)

    def _progress_claim(self, now: float) -> None:
        claim = self._claim
        if claim is None or self.role is not Role.CLAIMING:
            return
        if claim.fetching is None:
            # woke from a pause (before or during the claim): by its clock every member looks
            # silent, and claiming on its own stale history would make it master behind replicas
            # holding acknowledged writes; listen for member_timeout first
            claim.ready = max(claim.ready, self._resumed + self.config.member_timeout)
            claim.deadline = max(claim.deadline, claim.ready)
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
            if now < deadline:
                continue
            if source in self._live_members() and claim.stalls.get(source, 0) < CLAIM_FETCH_RETRIES:
                # still heard: a message of the fetch was lost (a window of one chunk, a lost
                # sfetch, a tail's chunk); ask again from what we hold, as a follower does, instead of
                # starting over in a new epoch (under steady loss a claim fetching hundreds of
                # chunks then never ended: ops fuzz seed 96)
                claim.stalls[source] = claim.stalls.get(source, 0) + 1
                claim.fetching[source] = now + self.config.fetch_timeout
                inc = self._snaps.get(source)
                if inc is not None and inc.for_claim and inc.epoch == claim.epoch:
                    self._snap_ask(inc, now)
                else:
                    self._send(Fetch(claim.epoch, self.id, source, None if claim.fetched is not None else self._fetch_from()))
                continue
            self._members.pop(source, None)  # the source went away: start over with whoever is left
            self._start_claim(now)
            return
        if not claim.fetching:
            self._finish_claim(claim, now)

    def _choose_sources(self, claim: _Claim, now: float) -> None:
        """Promises are in: find the most advanced histories (those no other history contains)."""
        heads = {self.id: self._reported(), **claim.promises}
        for node in self._subsumed_heads(heads):
            del heads[node]
        maximal: dict[Position, str] = {}
        for node in [n for n in [self.id, *sorted(claim.promises)] if n in heads]:
            pos = heads[node][0]
            if not any(opos != pos and contains(olin, olast, pos) for opos, olin, olast in heads.values()):
                maximal.setdefault(pos, node)
        sources = sorted(n for n in maximal.values() if n != self.id)
        claim.waiting.clear()
        claim.fetching = {s: now + self.config.fetch_timeout for s in sources}
        if len(maximal) == 1:  # one history at least as advanced as all: its tail (or a snapshot)
            for s in sources:
                self._send(Fetch(claim.epoch, self.id, s, self._fetch_from()))
        else:  # diverged histories (a healed split): take them all, and merge
            claim.fetched = {}
            claim.merge_self = self.id in maximal.values()
            for s in sources:
                self._send(Fetch(claim.epoch, self.id, s, None))  # None: a snapshot
        self._progress_claim(now)

    def _subsumed_heads(self, heads: dict[str, tuple[Position, Lineage, int]]) -> list[str]:
        """The nodes (the claimant too) whose announced history an earlier merge subsumed, when
        another node's history holds that merge (``_subsumed_at``): the claim takes that history (or
        one containing it), which holds all of theirs, so fetching and merging theirs again adds
        nothing, and in ``active`` (the subsumed histories are carried over) they take the new state
        like any replica left behind by a merge. Merged again instead, a stale replica's history was
        fetched by every later claim (a slow snapshot each: claims that never ended, no master for
        longer than a write's timeout; ops fuzz seed 96), and could bring back keys erased since on
        the merged line whose tombstones were forgotten. When no node holds the merge (only replicas
        left behind by it are there), their histories are taken as before."""
        at = self._subsumed_at
        if at is None or not self._subsumed:
            return []
        if not any(contains(lin, last, at) for _pos, lin, last in heads.values()):
            return []
        # only the merged histories, exact: a dropped tail (UNBOUNDED_SEQ) is held only up to its
        # master's durable point, and a replica past it may hold records a later claimant took over
        # and acknowledged (one that never heard of the drop, writing nothing of its own epoch since):
        # left out, they were lost (test_a_replica_past_a_dropped_tail_that_acknowledged_it_there_...)
        merged = [(slin, slast) for slin, slast in self._subsumed if slast != UNBOUNDED_SEQ]
        return [node for node, (pos, lin, last) in heads.items()
                if not contains(lin, last, at) and any(contains(slin, slast, pos) for slin, slast in merged)]

    def _report_conflicts(self, epoch: Epoch, conflicts: list[Conflict]) -> None:
        """Report each conflict once: a history merged again (a second claimant that had not
        seen the first merge) yields the same pairs of versions, which are not news."""
        seen = self._conflicts_reported
        fresh = []
        for c in conflicts:
            ident = (pack(c.key), frozenset({(c.chosen.hlc, c.chosen.origin), (c.other.hlc, c.other.origin)}))
            if ident not in seen:
                seen[ident] = None
                fresh.append(c)
        while len(seen) > CONFLICTS_KEPT:
            del seen[next(iter(seen))]
        if fresh:
            self._events.append(ConflictsFound(epoch, fresh))

    @staticmethod
    def _dropped_tails(claim: _Claim) -> list[tuple[Lineage, int]]:
        """The unacknowledged tails of the deposed masters that promised: each such master
        announced its history up to where it counted records durable (``_reported``), so a replica
        holding more of that master's epoch holds records acknowledged to nobody (its
        acknowledgements were lost, a broker crash, and it was away during the claim). Announced in
        ``active`` among the subsumed histories, they make such a replica take this master's state
        by snapshot (its writers re-send) instead of being merged as a diverged history, which a
        queue's store cannot survive (message ids handed out twice)."""
        return [(list(lineage), UNBOUNDED_SEQ) for node, (_pos, lineage, _last) in sorted(claim.promises.items())
                if lineage and lineage[-1][0][1] == node]  # the master of its last epoch

    def _finish_claim(self, claim: _Claim, now: float) -> None:
        dropped = self._dropped_tails(claim)
        if claim.own_tail is not None:
            # this claimant is such a deposed master too: a follower may hold part of its tail (it
            # missed this claim: a claim held up on the way, a clustered broker's stalled topic)
            dropped.append((list(claim.own_tail), UNBOUNDED_SEQ))
        conflicts: list[Conflict] = []
        subsumed: list[tuple[Lineage, int]] = []
        if claim.fetched:  # diverged histories: merge them all into a new line of this epoch
            states = [*([self.state] if claim.merge_self else []), *(claim.fetched[s] for s in sorted(claim.fetched))]
            # the merged histories, as they were: followers at any of their positions take the merge
            subsumed = [(list(s.lineage), s.last_seq) for s in states]
            at = self._subsumed_at
            if at is not None and any(s.contains(at) for s in states):
                # those an earlier merge subsumed are held by this one too: a replica still at one
                # (left out of this claim: _subsumed_heads) takes this merge's state. Not the dropped
                # tails (UNBOUNDED_SEQ): held only up to their durable points, carried on they made a
                # replica that a claimant cut off from the drop took past it (and acknowledged there)
                # take this state, as a merge before did not (test_a_dropped_tail_is_not_carried_...)
                subsumed = [*(h for h in self._subsumed if h not in subsumed and h[1] != UNBOUNDED_SEQ), *subsumed]
            refused: list[str] = []
            parts, conflicts = merge_histories(states, claim.epoch, resolver=self.resolver, refused=refused)
            if refused:
                self.stats.resolver_errors += len(refused)
                self._events.append(ResolverRefused(claim.epoch, refused))
            changes = self.state.replace(**parts, report=self.wants_data())
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
        at = self._subsumed_at
        if claim.fetched or not self._subsumed or (at is not None and self.state.contains(at)):
            # this state holds what is listed: the histories merged, those an earlier merge subsumed
            # (carried over only when held, above), the dropped tails up to their durable points
            self._subsumed_at = self.state.position
        else:  # took over a history without the merge that subsumed those listed (none there held it)
            self._subsumed_at = None
        listed = [*(subsumed or self._subsumed), *dropped]
        # (each once: a tail announced again at every claim crowded out the others)
        self._subsumed = [h for i, h in enumerate(listed) if h not in listed[:i]][-SUBSUMED_KEPT:]
        for m in self._members.values():
            m.acked = 0
        self._acked_n = {}
        self._unacked = {}
        self._rounds = {}
        self._unanswered = {}
        self._repeat_answers = {}
        self._logged_answers = {}
        self._applied_from = {}
        self._sent_upto = {}
        self._held_back = {}
        self._send(Active(claim.epoch, self.state.position, self.state.lineage, conflicts, self._subsumed,
                          self._subsumed_at))
        if conflicts:
            self._conflicts_seen.add(claim.epoch)
            self._report_conflicts(claim.epoch, conflicts)
        self._set_master(self.id, "")
        self._mark_synced()
