"""The serving side of an elected-store replica: ``fetch`` answered with a tail of the log, ``sfetch``
with snapshot chunks, read ahead (``docs/elected-stores.md`` § 3).

A replica that holds what a lagging or joining one lacks answers its ``fetch`` with the records after
its position, while its log holds them, and otherwise with a snapshot: the state in chunks of at most
``snapshot_chunk`` bytes, a window of them per ``sfetch``, in key order (:mod:`.snapshot_stream`).
The next window of a requester is read ahead while it takes in the last (:class:`~.snapshot_stream.ReadAhead`).
"""

from __future__ import annotations

from .replica_claim import ClaimSide
from .replica_events import Role
from .replica_messages import Fetch, SnapChunk, SnapFetch, Tail
from .snapshot_stream import READ_AHEAD_DELAY, ReadAhead, SnapshotReader, chunk_budget, touched_keys
from .versioned import Epoch, Position

__all__ = ["ServingSide", "MAX_WINDOW", "CHUNK_HEADROOM", "MAX_READ_AHEAD"]

MAX_WINDOW = 64  #: snapshot chunks one ``sfetch`` gets at most
CHUNK_HEADROOM = 1024  #: bytes of a chunk message left for its fields beside the entries (and its two keys)
MAX_READ_AHEAD = 4  #: requesters whose next window of snapshot chunks is read ahead at a time (ReadAhead)


class ServingSide(ClaimSide):
    """``fetch`` and ``sfetch`` answers: tails of the log, snapshot chunks."""

    def _on_fetch(self, msg: Fetch, now: float) -> None:
        epoch, requester, pos = msg.epoch, msg.requester, msg.from_pos
        assert epoch is not None  # decode() takes no fetch without one
        if msg.source != self.id or requester == self.id:
            return
        if pos is None:
            self._serve_snapshot(epoch, requester, None, None, self.config.snapshot_window)
            return
        if self.role is Role.MASTER and not self._holds(pos):
            self._start_claim(now)  # its history diverged and was never merged: merge it first (its
            # unacknowledged tail dropped, as in _on_hb)
            return
        seq = pos[0]
        if self.state.contains(pos) and (seq == self.state.last_seq or self._log.covers(seq, self.state.last_seq)):
            for chunk in self._log.after(seq):
                self._send(Tail(epoch, requester, chunk, self.state.last_seq, self.id))
        else:
            self._serve_snapshot(epoch, requester, None, None, self.config.snapshot_window)

    def _on_sfetch(self, msg: SnapFetch, now: float) -> None:
        if msg.source != self.id or msg.requester == self.id:
            return
        self._serve_snapshot(msg.epoch, msg.requester, msg.after, msg.since, max(1, min(msg.window, MAX_WINDOW)))

    def _serve_snapshot(self, epoch: Epoch, to: str, after: bytes | None, since: Position | None, window: int,
                        *, taken: bool = False) -> None:
        """Up to ``window`` chunks of the state for ``to`` (:mod:`.snapshot_stream`): the entries after key
        ``after`` written after ``since``, or, when the log tells what changed since ``since`` and that
        is little, the final burst that completes the snapshot at this node's position. A pass that
        needs a key order of more keys than one step sorts waits for it (:meth:`_take_order`; ``taken``:
        the order it waited for is there)."""
        if self._now - self._snap_served_at >= 2 * self.config.fetch_timeout:
            self._snap_paused_at = self._now  # no tombstone is forgotten from now, for a while (_expire)
        self._snap_served_at = self._now
        reader = self._reader
        if reader is None or reader.state is not self.state:
            reader = self._reader = SnapshotReader(self.state)
            self._snap_waiting.clear()
            self._read_ahead.clear()
        ahead = self._read_ahead.pop(to, None)  # used below if it read this very window
        budget = max(1, self.config.snapshot_chunk - CHUNK_HEADROOM)
        last = self.state.last_seq
        if since is not None:
            if not self.state.contains(since):  # merged away, or another history: start over
                self._send(SnapChunk(epoch, to, self.id, after, since, None, [], None))
                return
            if after is None and (since[0] == last or self._log.covers(since[0], last)):
                keys = touched_keys(self._log, since[0]) if since[0] < last else set()
                if keys is not None and len(keys) * 64 <= window * budget:
                    burst = reader.final(sorted(keys), budget)
                    pos = self.state.position
                    for i, (entries, applied) in enumerate(burst):
                        header = reader.header() if i == len(burst) - 1 else None
                        self._send(SnapChunk(epoch, to, self.id, after, since, pos, entries, None, True, applied, header))
                    return
        if since is not None and self.state.forgot_seq > since[0]:
            # a key erased after the pass began, and its tombstone forgotten since: the requester may
            # hold it live from an earlier pass, and a pass of changes cannot name it, so it starts
            # over (a review saw a joiner keep keys erased and forgotten during its join)
            self._send(SnapChunk(epoch, to, self.id, after, since, None, [], None))
            return
        if not taken and not reader.ready(after is None):
            self._snap_waiting[to] = (epoch, after, since, window)  # answered once the order is taken
            return
        read = [] if ahead is None else ahead.take(epoch, after, since, self.state.generation)
        if not read:  # nothing read ahead: the first chunk at once, the rest of the window as read
            read = [reader.chunk(after, 0 if since is None else since[0], chunk_budget(budget, after))]
        for entries, nxt, pos in read[:window]:
            self._send(SnapChunk(epoch, to, self.id, after, since, pos, entries, nxt))
            if nxt is None:
                return
            after = nxt
        assert after is not None
        owed = max(0, window - len(read))
        if owed or self._reading_ahead_for() < MAX_READ_AHEAD:  # the pass goes on: read on meanwhile
            start = self._now if owed else self._now + READ_AHEAD_DELAY
            # (at most our own window read ahead: up to 4 requesters' 64-chunk windows held was 64 MB)
            self._read_ahead[to] = ReadAhead(epoch, since, after, min(window, self.config.snapshot_window), budget,
                                             self.state.generation, start, self._now + self.config.fetch_timeout,
                                             owed=owed)

    @property
    def _taking_order(self) -> bool:
        """The snapshot reader is taking a key order, a slice per :meth:`_take_order`."""
        return self._reader is not None and self._reader.taking

    @property
    def _read_ahead_at(self) -> float:
        """When the next chunk owed or read ahead is due (:meth:`_step_read_ahead`), or when the first
        window read ahead and not asked for is dropped."""
        return min(ahead.next_step for ahead in self._read_ahead.values())

    def _reading_ahead_for(self) -> int:
        """Requesters whose next window is read ahead (not owed chunks of the last)."""
        return sum(1 for ahead in self._read_ahead.values() if not ahead.owed)

    def _step_read_ahead(self) -> None:
        """Read the next chunk of a window read ahead (:class:`~.snapshot_stream.ReadAhead`; the timers
        run a step at a time while one is unread); drop those not asked for in time, or read from a
        state since replaced."""
        now, generation = self._now, self.state.generation
        for to in [to for to, a in self._read_ahead.items() if now >= a.due or a.generation != generation]:
            del self._read_ahead[to]
        reader = self._reader
        if reader is None or reader.state is not self.state:
            self._read_ahead.clear()
            return
        # an owed chunk first (its requester waits for it), else one to read ahead
        due = [(to, a) for to, a in self._read_ahead.items() if now >= a.start and (a.owed or not a.done)]
        if not due:
            return
        to, ahead = next(((to, a) for to, a in due if a.owed), due[0])
        if not ahead.owed:
            ahead.step(reader)
            return
        after, (entries, nxt, pos) = ahead.pay(reader)
        self._send(SnapChunk(ahead.epoch, to, self.id, after, ahead.since, pos, entries, nxt))
        del self._read_ahead[to]
        if nxt is None:
            return  # the pass is complete
        # back in at the end: the requesters owed chunks take turns, and one that is being paid is
        # not dropped as gone (a 64-chunk window owed behind other requesters' outlasted fetch_timeout)
        self._read_ahead[to] = ahead
        ahead.due = now + self.config.fetch_timeout
        if not ahead.owed:  # the window is out: read the next one ahead meanwhile, if room
            if self._reading_ahead_for() > MAX_READ_AHEAD:  # (this one counted)
                del self._read_ahead[to]
            else:
                ahead.start, ahead.due = now + READ_AHEAD_DELAY, now + self.config.fetch_timeout

    def _take_order(self) -> None:
        """A step of the key order the snapshot reader is taking (the timers run it while one is: a
        large state's order is taken a slice at a time, not in one stall); once it is taken, the
        passes waiting for it are served."""
        reader = self._reader
        if reader is None or not reader.step():
            return
        waiting, self._snap_waiting = self._snap_waiting, {}
        for to, (epoch, after, since, window) in waiting.items():
            self._serve_snapshot(epoch, to, after, since, window, taken=True)
