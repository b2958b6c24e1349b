"""Snapshots that stream: a replica's state in bounded chunks, in key order (``docs/elected-stores.md`` § 3).

A replica that needs the whole state (a new one, one too far behind for the log, one whose tail must
go) pulls it from the source (the master, or the replica a claimant fetches from) in *passes*:

* the first pass reads every entry (tombstones included) in packed-key order, ``window`` chunks per
  ``sfetch``, each chunk at most ``ReplicaConfig.snapshot_chunk`` bytes of entries; the requester asks
  for the next window when the last chunk of the previous one arrived (flow control), and again from
  the last key it holds when chunks stop coming (a lost chunk, a dropped connection: resumable);
  meanwhile the source reads that next window ahead (:class:`ReadAhead`), so neither side waits for
  the other to work;
* the source reads each chunk at the time it sends it, so a pass is fuzzy: each chunk is stamped with
  the source's position when its key order was taken (``pos``, a lower bound), and the requester then
  asks for what changed since the lowest of them (``since``). The source answers that from its log when
  the log reaches back there and the change is small: one *final* burst, built in one step, so the
  result is the state at exactly the position it names (``header``); otherwise by another pass that
  sends only the entries written after ``since``; and so on until a final burst;
* a source whose history no longer contains ``since`` (another epoch merged it away) answers with no
  position: the requester starts over.

The requester decodes each chunk's entries as it arrives into the form its state holds them
(:class:`~.versioned.StateEntries`, in :class:`Incoming`), and its state adopts them at the final burst
(:meth:`Incoming.parts`): the work is spread over the chunks, not done in one step at the end (which
stalled a joiner's event loop ~5 s per million keys). A malformed entry fails its chunk. Nothing here
does I/O.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import BackendError, StoreDecodeError
from .history import Epoch, Position, Record, Version, version_columns
from .packing import canonical, pack, unpack
from .versioned import StateEntries, VersionedState
from .writer_table import applied_from_wire

__all__ = ["SnapshotReader", "ReadAhead", "Incoming", "touched_keys", "SCAN_LIMIT", "SORT_SLICE"]

SCAN_LIMIT = 50_000  #: keys a chunk of a pass of changes looks at, at most (it may then carry few)
SORT_SLICE = 131_072  #: keys sorted in one step when a pass's key order is taken (~60 ms at most)
ENTRY_OVERHEAD = 8  #: bytes counted per entry beside its packed key and version (the list around them)
ROWS_PER_QUERY = 2_048  #: keys a chunk of a state on disk reads per query of its file
PASS_BOUNDS_KEPT = 64  #: passes over a state on disk whose bound a source remembers (_chunk_on_disk)
READ_AHEAD_DELAY = 0.005  #: s after serving a window before its source reads the next (ReadAhead)
ASK_PENDING = 2  #: chunks a requester may still have to stage when it asks for the next window (Incoming)

Entry = tuple[bytes, bytes | None]


class _Ordering:
    """A key order being taken a step at a time: the keys as listed at ``pos`` (``stamp``), sorted
    SORT_SLICE at a time into runs."""

    __slots__ = ("keys", "runs", "stamp", "pos")

    def __init__(self, state: VersionedState, stamp: tuple[int, int, int]) -> None:
        state.begin_new_keys()  # what comes in from now on, the order takes in later at little cost
        # tuples, not lists: a tuple of bytes leaves the garbage collector's walk after its first
        # collection, a list never does (10,000,000 keys walked by every full collection cost the
        # source 1.5 s per million entries it served)
        self.keys: tuple[bytes, ...] = tuple(state.packed_keys())
        self.runs: list[tuple[bytes, ...]] = []
        self.stamp, self.pos = stamp, state.position

    def step(self) -> bool:
        """Sort the next slice of keys; True once every key is in a run."""
        done = sum(len(run) for run in self.runs)
        if done < len(self.keys):
            self.runs.append(tuple(sorted(self.keys[done:done + SORT_SLICE])))
            done += len(self.runs[-1])
        if done < len(self.keys):
            return False
        self.keys = ()
        return True


class SnapshotReader:
    """The source's side: chunks of ``state`` in packed-key order. Keeps the keys in sorted runs (one
    for a state of up to SORT_SLICE keys). A pass begun after the state changed needs the order as
    of now: the keys that came in since the order was taken are sorted into its last run (the state
    notes them, :meth:`~.versioned.VersionedState.begin_new_keys`). The whole order is taken anew,
    a slice at a time (:meth:`ready`, :meth:`step`), only at first, after the state was replaced, when
    more keys came in than the state notes, or when half the order is keys no longer there. Sorting
    every key at the start of each pass stalled the source's event loop (0.6 s per million random
    keys), and taking the whole order in slices each time let its position fall behind the writes."""

    def __init__(self, state: VersionedState) -> None:
        self.state = state
        self._runs: list[tuple[bytes, ...]] = []
        self._stamp: tuple[int, int, int] | None = None
        self._pos: Position = (0, None)
        self._next: _Ordering | None = None  # an order being taken, a slice at a time
        # a state on disk: (generation, since seq) of a pass -> the seq it reads up to (_chunk_on_disk)
        self._bounds: dict[tuple[int, int], int] = {}

    @property
    def taking(self) -> bool:
        """An order is being taken: :meth:`step` it (the source's timers do, at once)."""
        return self._next is not None

    def ready(self, fresh: bool) -> bool:
        """Whether :meth:`chunk` can answer now. A new pass (``fresh``) needs the key order taken
        since the state last changed; a pass under way goes on in the order it began with. If the
        order needed is not there, it is taken: at once up to SORT_SLICE keys, else a slice per
        :meth:`step` (False until the last one; an order already being taken is waited for, whenever
        it began: its position is a lower bound, which is all a fuzzy pass needs)."""
        s = self.state
        if s.on_disk:  # it reads its file in key order: no order to take
            return True
        stamp = (s.generation, s.last_seq, id(s))
        if self._stamp is not None and (not fresh or stamp == self._stamp):
            return True
        if self._next is None:
            if self._stamp is not None and self._stamp[0::2] == stamp[0::2] and self._bring_up_to_date():
                self._stamp, self._pos = stamp, s.position
                return True
            self._next = _Ordering(s, stamp)
        return self.step() if len(self._next.keys) <= SORT_SLICE else False

    def _bring_up_to_date(self) -> bool:
        """Sort the keys new since the order was taken into its last run; False (nothing changed) if
        the state did not note them all, or if half the order is keys gone since (forgotten)."""
        new = self.state.take_new_keys()
        if new is None:
            return False
        runs = self._runs
        if sum(map(len, runs)) > 2 * (len(self.state) + self.state.tombstones) + SORT_SLICE:
            return False
        if new:
            if runs and len(runs[-1]) < SORT_SLICE:
                runs[-1] = tuple(sorted(itertools.chain(runs[-1], new)))
            else:
                runs.append(tuple(sorted(new)))
        return True

    def step(self) -> bool:
        """Take the next slice of the order being taken; True once it is the order (nothing being taken)."""
        nxt = self._next
        if nxt is None:
            return True
        if not nxt.step():
            return False
        self._runs, self._stamp, self._pos, self._next = nxt.runs, nxt.stamp, nxt.pos, None
        return True

    def _keys_after(self, after: bytes | None) -> Iterator[bytes]:
        """The keys of the order after ``after``, in order (the runs merged)."""
        its = [map(run.__getitem__, range(0 if after is None else bisect.bisect_right(run, after), len(run)))
               for run in self._runs]
        return its[0] if len(its) == 1 else heapq.merge(*its) if its else iter(())

    def chunk(self, after: bytes | None, since_seq: int, budget: int) -> tuple[list[Entry], bytes | None, Position]:
        """Entries after key ``after`` written after seq ``since_seq``, up to ``budget`` bytes (at least
        one entry): ``(entries, the last key covered or None at the end, the position of the key order)``.
        Takes the order at once if it is not :meth:`ready`."""
        if self.state.on_disk:
            return self._chunk_on_disk(after, since_seq, budget)
        while not self.ready(after is None):
            self.step()
        versions = self.state
        rows = ((k, versions.packed_row(k, since_seq)) for k in self._keys_after(after))
        return _fill_chunk(rows, budget, SCAN_LIMIT if since_seq else None, self._pos)

    def _chunk_on_disk(self, after: bytes | None, since_seq: int, budget: int) -> Chunk:
        """:meth:`chunk` of a state that reads its file in key order (:attr:`VersionedState.on_disk`).

        Such a pass reads the entries as they are when each chunk is read, not as of a key order
        taken at its start, so keys written behind its cursor would keep it going for as long as
        the writes do (keys that grow, as a queue's ids). So a pass has a bound, the source's seq
        when it began (kept per pass start and pass, ``_bounds``): an entry written after it is left
        to the next pass, and the chunk's position is the bound's. Any bound is correct (the next
        pass asks for what changed since the lowest position of this one's chunks); a bound that
        stays put is what ends the pass. A first pass stops at SCAN_LIMIT rows too: it skips the
        rows past its bound."""
        state = self.state
        key = (state.generation, since_seq)
        bound = None if after is None else self._bounds.get(key)
        if bound is None or bound > state.last_seq:
            bound = self._bounds[key] = state.last_seq
            while len(self._bounds) > PASS_BOUNDS_KEPT:
                del self._bounds[next(iter(self._bounds))]

        def rows() -> Iterator[tuple[bytes, bytes | None]]:
            last = after
            while True:
                read = state.rows_after(last, since_seq, bound, ROWS_PER_QUERY)
                yield from read
                if len(read) < ROWS_PER_QUERY:
                    return
                last = read[-1][0]

        return _fill_chunk(rows(), budget, SCAN_LIMIT, (bound, state.epoch_at(bound)))

    def final(self, keys: Iterable[bytes], budget: int) -> list[tuple[list[Entry], list[Any]]]:
        """The current versions of ``keys`` (None: gone) and the writer table, as chunks of at most
        ``budget`` bytes each: ``[(entries, applied rows), ...]`` (at least one)."""
        out: list[tuple[list[Entry], list[Any]]] = [([], [])]
        size = 0

        def add(n: int) -> tuple[list[Entry], list[Any]]:
            nonlocal size
            if size + n > budget and (out[-1][0] or out[-1][1]):
                out.append(([], []))
                size = 0
            size += n
            return out[-1]

        for k in keys:
            pv = self.state.packed_row(k)
            add(len(k) + (len(pv) if pv else 1) + ENTRY_OVERHEAD)[0].append((k, pv))
        for w, a in self.state.applied.items():
            row = [w, a.n, a.seq, [[n, r] for n, r in a.results.items()]]
            add(len(pack(row)))[1].append(row)
        return out

    def header(self) -> tuple[int, Any, int]:
        s = self.state
        return s.last_seq, list(s.lineage), s.max_hlc


Chunk = tuple[list[Entry], bytes | None, Position]  #: :meth:`SnapshotReader.chunk`'s answer


def _fill_chunk(rows: Iterator[tuple[bytes, bytes | None]], budget: int, scan_limit: int | None,
                pos: Position) -> Chunk:
    """A chunk of the ``(key, packed version or None: not sent)`` rows, in key order: up to ``budget``
    bytes of entries (at least one), looking at ``scan_limit`` rows at most (None: no limit);
    ``(entries, the last key covered or None at the end, pos)``."""
    entries: list[Entry] = []
    size = 0
    last: bytes | None = None
    for scanned, (k, pv) in enumerate(rows, 1):
        if k == last:
            continue  # in two runs (forgotten, then written again): once
        if pv is not None:
            n = len(k) + len(pv) + ENTRY_OVERHEAD
            if entries and size + n > budget:
                return entries, last, pos  # k is not covered: the next chunk begins with it
            entries.append((k, pv))
            size += n
        last = k
        if scan_limit is not None and scanned >= scan_limit:
            break
    else:
        return entries, None, pos
    return entries, (last if next(rows, None) is not None else None), pos


def chunk_budget(budget: int, after: bytes | None) -> int:
    """The bytes of entries a chunk after key ``after`` may carry: the chunk message names the key
    twice (``after`` and ``next``), so the longer the key, the fewer entries."""
    return budget - 2 * len(after or b"")


@dataclass(slots=True)
class ReadAhead:
    """The source reads a requester's next window of a pass before the requester asks for it.

    Without it the source and the requester took turns: the requester asks for the next window only
    once the last one arrived and was taken in (flow control), and the source read the whole window
    only then, so each sat idle while the other worked (a 1,000,000-key join took the sum of both
    sides' CPU time). Now, after serving a window that does not end the pass, the source reads the
    next one here, a chunk per step, while the requester takes in the one it got. Its timers run the
    steps, the first READ_AHEAD_DELAY after the window was served: reading at once held up the
    sending of that window (its megabyte went out a socket buffer at a time between the steps, and
    the requester sat idle meanwhile). When the requester asks for exactly that window (same epoch,
    pass and cursor, the state not replaced meanwhile), what is read of it is sent at once; the rest
    of it is ``owed``: read a chunk per step as before, each sent as soon as it is read (a window
    asked for with nothing read goes out so too, after its first chunk), and then the next window
    is read ahead. Anything else asked for, and what was read is dropped.

    A chunk read ahead is as good as one read when asked for: a pass is fuzzy anyway, each chunk
    stamped with the position of its key order (a lower bound of when its entries were read), and
    the checks that a pass may go on (its ``since`` still in the history, no tombstone forgotten
    since) are made when it is asked for, not here. Holds at most ``window`` chunks (each within the
    chunk size); owed chunks are not held (sent as read)."""

    epoch: Epoch
    since: Position | None
    after: bytes  # where the window begins: the last key the window served before it covers
    window: int
    budget: int  # bytes of entries per chunk, before chunk_budget's share for the keys
    generation: int  # the state's (VersionedState.generation): a replaced state drops what was read
    start: float  # not read before then: the window just served goes out first
    due: float  # dropped unless asked for by then (the requester went away)
    chunks: list[Chunk] = field(default_factory=list)
    owed: int = 0  # chunks of the window asked for still to read and send (``after``: where the next begins)

    @property
    def next_step(self) -> float:
        """When :meth:`step` is next due (an owed chunk or one to read ahead), or when this is dropped
        unless asked for (the window is read)."""
        return self.start if self.owed or not self.done else self.due

    @property
    def done(self) -> bool:
        """The window is read (or the pass ends within it)."""
        return len(self.chunks) >= self.window or (bool(self.chunks) and self.chunks[-1][1] is None)

    def step(self, reader: SnapshotReader) -> None:
        """Read the window's next chunk."""
        after = self.chunks[-1][1] if self.chunks else self.after
        since_seq = 0 if self.since is None else self.since[0]
        self.chunks.append(reader.chunk(after, since_seq, chunk_budget(self.budget, after)))

    def take(self, epoch: Epoch, after: bytes | None, since: Position | None, generation: int) -> list[Chunk]:
        """The chunks read for a request of the window after ``after`` (in pass ``since`` of ``epoch``);
        none if they were read for another, or before the state was replaced, or are owed to one."""
        if self.owed or (epoch, after, since, generation) != (self.epoch, self.after, self.since, self.generation):
            return []
        return self.chunks

    def pay(self, reader: SnapshotReader) -> tuple[bytes, Chunk]:
        """Read the next owed chunk: ``(the key it begins after, the chunk)``; ``after`` moves on past it."""
        self.step(reader)
        after, chunk = self.after, self.chunks.pop()
        self.owed -= 1
        if chunk[1] is not None:
            self.after = chunk[1]
        return after, chunk


def touched_keys(records: Iterable[Record], after_seq: int) -> set[bytes] | None:
    """The packed keys the records after ``after_seq`` wrote; None if one of them cleared the store."""
    out: set[bytes] = set()
    for r in records:
        if r.seq <= after_seq:
            continue
        op = r.op
        for one in (op[1] if op[0] == "many" else (op,)):
            if one[0] == "clear":
                return None
            if one[0] != "noop":  # every other op names its key first
                out.add(pack(one[1]))
    return out


@dataclass(slots=True)
class Incoming:
    """The requester's side: a snapshot being received from ``source`` in ``epoch``."""

    source: str
    epoch: Epoch
    for_claim: bool
    staged: StateEntries = field(default_factory=StateEntries)  # the entries so far, decoded
    cursor: bytes | None = None  # the last key of the current pass received
    since: Position | None = None  # the current pass: entries written after this (None: all)
    low: Position | None = None  # the lowest position a chunk of the current pass was read at
    left: int = 0  # chunks of the window asked for that have not come yet
    asked: tuple[bytes | None, Position | None] | None = None  # the last request sent
    applied: list[Any] = field(default_factory=list)
    pending: deque[list[Entry]] = field(default_factory=deque)  # the entries of chunks taken, not yet staged
    # stages each chunk's rows in this state's file too (VersionedState.stage_rows), so that the install
    # takes them in one step: ``token`` is the staging's, None once the file is not (or no longer) staged
    file: VersionedState | None = None
    token: int | None = None
    # a state on disk (VersionedState.on_disk) takes the staged rows only: nothing is decoded into ``staged``
    on_disk: bool = False
    staged_upto: bytes = b""  # on disk: the largest key staged (a first pass's keys come after it)

    def __post_init__(self) -> None:
        self.on_disk = self.file is not None and self.file.on_disk
        self._begin_file()

    def _begin_file(self) -> None:
        if self.file is not None:
            self.token = self.file.begin_staging()

    def matches(self, after: bytes | None, since: Position | None) -> bool:
        return after == self.cursor and since == self.since

    def take(self, entries: list[Entry], nxt: bytes | None, pos: Position) -> None:
        """A chunk of the current pass: move the cursor; its entries wait in ``pending`` until
        :meth:`step` stages them. The requester handles a chunk at once, so that its ask for the
        next window goes out before it works on this one: it stages the chunks it holds, a step at
        a time, while the next come (see :meth:`may_ask`)."""
        self.pending.append(entries)
        if self.low is None or pos[0] < self.low[0]:
            self.low = pos
        self.cursor = nxt
        self.left -= 1

    def may_ask(self) -> bool:
        """The window asked for has come, the pass goes on (a cursor) and its next window is not asked
        for yet, and what is left to stage is little enough for it to be asked for now (ASK_PENDING
        chunks: the time to stage them covers the ask's round trip; the chunks held unstaged stay
        within a window and ASK_PENDING)."""
        return (self.left <= 0 and len(self.pending) <= ASK_PENDING and self.cursor is not None
                and self.asked != (self.cursor, self.since))

    def step(self) -> None:
        """Stage the oldest chunk taken (:meth:`take`). Raises StoreDecodeError for a malformed entry
        (the entries before it are staged: the caller starts over)."""
        self._stage(self.pending.popleft(), [])

    def stage(self, entries: list[Entry], applied: list[Any]) -> None:
        """A chunk of the final burst: its entries and writer rows, staged at once, after every chunk
        taken before it. Raises StoreDecodeError for a malformed entry (the caller starts over)."""
        while self.pending:
            self.step()
        self._stage(entries, applied)

    def _stage(self, entries: list[Entry], applied: list[Any]) -> None:
        if self.on_disk:
            self._stage_on_disk(entries)
            self.applied.extend(applied)
            return
        staged, file = self.staged, self.file
        rows: dict[bytes, bytes | None] | None = {} if self.token is not None else None
        try:
            for k, v in entries:
                key = canonical(k)  # as the state keys it (a peer's packing may not be canonical)
                if v is None:
                    staged.drop(key)
                else:
                    staged.set(key, Version.from_wire(unpack(v)))
                if rows is not None:
                    rows[key] = v  # (a malformed entry raised above: the file stages whole chunks only)
        except (TypeError, ValueError, OverflowError, BackendError) as exc:  # (BackendError: not CBOR)
            raise StoreDecodeError(f"bad snapshot chunk: {exc}") from exc
        if rows and file is not None and self.token is not None:
            filed = [(k, v) for k, v in rows.items() if v is not None]
            if not file.stage_rows(self.token, filed, [(k,) for k, v in rows.items() if v is None]):
                self.token = None  # staging began again elsewhere: this snapshot installs in full
        self.applied.extend(applied)

    def _stage_on_disk(self, entries: list[Entry]) -> None:
        """:meth:`_stage` into the file of a state on disk: each entry checked (its columns taken
        from its version, as the state keys and keeps them), none decoded into ``staged``."""
        file, token = self.file, self.token
        assert file is not None
        items: list[tuple[bytes, tuple[Any, ...] | None]] = []  # (key, its row, or None: gone)
        # new keys only (counted without a lookup): a first pass's, each after every key staged before
        last, fresh = self.staged_upto, self.since is None
        try:
            for k, v in entries:
                key = canonical(k)  # as the state keys it (a peer's packing may not be canonical)
                if key > last:
                    last = key
                else:
                    fresh = False
                if v is None:
                    items.append((key, None))
                    fresh = False
                else:
                    items.append((key, (key, v, *version_columns(unpack(v)))))
        except (TypeError, ValueError, OverflowError, BackendError) as exc:  # (BackendError: not CBOR)
            raise StoreDecodeError(f"bad snapshot chunk: {exc}") from exc
        self.staged_upto = last
        latest = items if fresh else list(dict(items).items())  # (a key twice, a peer's packing: the last stands)
        rows = [row for _, row in latest if row is not None]
        gone = [] if fresh else [(key,) for key, row in latest if row is None]
        if token is None or not file.stage_rows(token, rows, gone, first_pass=fresh):
            self.token = None
            raise StoreDecodeError("the snapshot's staged rows were dropped (staging began again): start over")

    def next_pass(self) -> None:
        """The pass is complete: next, what changed since the lowest position of its chunks."""
        self.since, self.low, self.cursor, self.left = self.low, None, None, 0

    def restart(self) -> None:
        self.staged = StateEntries()
        self.staged_upto = b""
        self.pending.clear()
        self.applied.clear()
        self.since = self.low = self.cursor = None
        self.left = 0
        self._begin_file()

    def parts(self, header: tuple[int, Any, int]) -> dict[str, Any]:
        """The staged state (every chunk staged: after :meth:`stage`) as keyword arguments of
        :meth:`~.versioned.VersionedState.adopt`. Raises StoreDecodeError for a malformed writer row."""
        assert not self.pending
        seq, lineage, hlc = header
        return {"entries": None if self.on_disk else self.staged, "last_seq": seq, "lineage": lineage,
                "applied": applied_from_wire(self.applied), "max_hlc": hlc,
                "staged": self.token}
