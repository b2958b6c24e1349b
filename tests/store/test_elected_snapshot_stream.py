"""Streamed snapshots (sans-io): a state larger than a chunk reaches a joining replica in bounded chunks,
resumes after a lost chunk or a cut, ends consistent with the writes made meanwhile, installs once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _elected_sim import SimNet, record_sends, staged_entries

from broker_mqtt.store import replica_serving, snapshot_stream, versioned
from broker_mqtt.store.commands import Erase, Put
from broker_mqtt.store.errors import StoreDecodeError
from broker_mqtt.store.history import Record
from broker_mqtt.store.packing import unpack
from broker_mqtt.store.replica_messages import Fetch, SnapFetch, encode
from broker_mqtt.store.replication import ReplicaConfig
from broker_mqtt.store.versioned import VersionedState
from broker_mqtt.wire import codec

CHUNK = 2048
CONFIG = ReplicaConfig(log_keep=50, snapshot_chunk=CHUNK, snapshot_window=2)


def filled(n: int = 400, seed: int = 3) -> SimNet:
    """Nodes a (master) and b, ``n`` keys of 100-byte values written, beyond what the log keeps."""
    net = SimNet(["a", "b"], seed=seed, config=CONFIG)
    net.tag("a")
    net.run(1.0)
    for i in range(n):
        net.write("a", Put(f"k{i:04}", f"{i:0100d}"))
        if i % 50 == 0:
            net.run(0.05)
    net.run(1.0)
    assert net.masters() == ["a"] and len(net.nodes["b"].replica.state) == n
    return net


def churn(net: SimNet, i: int) -> None:
    """Write number ``i`` of a churn during a join: a put over the keys of :func:`filled` and beyond,
    every fifth an erase."""
    net.write("a", Put(f"k{(i * 7) % 500:04}", i) if i % 5 else Erase(f"k{i:04}"))


def dropping(net: SimNet, name: str, drop: Callable[[list[Any]], bool]) -> list[list[Any]]:
    """From now on ``name`` sends nothing that ``drop`` picks (it is lost on the way); returns what was dropped."""
    replica = net.nodes[name].replica
    send, dropped = replica.to_send, []

    def filtered() -> list[list[Any]]:
        out = []
        for m in send():
            (dropped if drop(m) else out).append(m)
        return out

    replica.to_send = filtered  # type: ignore[method-assign]
    return dropped


def chunks_to(msgs: list[list[Any]], to: str) -> list[list[Any]]:
    return [m for m in msgs if m[0] == "schunk" and m[2] == to]


def until_chunks(net: SimNet, sent: list[list[Any]], n: int) -> None:
    """Run until ``sent`` (a's, recorded) holds ``n`` chunks for c."""
    while len(chunks_to(sent, "c.0")) < n:
        net.run(0.001)


def new_master_midway(net: SimNet, sent: list[list[Any]]) -> None:
    """Once c got 4 chunks of a's snapshot, b becomes master and writes "new": c's snapshot from a is
    abandoned, and it fetches b's."""
    until_chunks(net, sent, 4)
    net.untag("a")
    net.tag("b")
    net.run(1.0)
    net.write("b", Put("new", 1))
    net.run(4.0)


def test_a_state_larger_than_a_chunk_joins_in_bounded_chunks() -> None:
    with filled() as net:
        sent = record_sends(net.nodes["a"].replica)
        asks = record_sends(net.add("c").replica)
        net.run(3.0)
        c = net.nodes["c"].replica
        assert net.contents("c") == net.contents("a") and not c.stale
        chunks = chunks_to(sent, "c.0")
        assert len(chunks) > 10  # 400 keys of ~130 bytes in chunks of 2 KB
        assert all(len(codec.encode(m)) <= CHUNK for m in chunks)
        assert c.stats.snapshots_installed == 1 and c.stats.snapshot_entries == 400
        # flow control: c asked for every window (2 chunks each) after the first
        assert sum(1 for m in asks if m[0] == "sfetch") >= len(chunks) // 2 - 1
        assert not [m for m in sent if m[0] == "snap"]


def test_a_lost_chunk_is_asked_again_not_the_whole_snapshot() -> None:
    with filled() as net:
        seen: list[list[Any]] = []

        def fifth(m: list[Any]) -> bool:
            if m[0] == "schunk" and m[2] == "c.0":
                seen.append(m)
                return len(seen) == 5
            return False

        dropped = dropping(net, "a", fifth)
        net.add("c")
        net.run(3.0)
        c = net.nodes["c"].replica
        assert len(dropped) == 1
        assert net.contents("c") == net.contents("a") and not c.stale
        assert c.stats.snapshots_installed == 1
        # resumed from the last key c held: one pass from the first key, not two
        assert sum(1 for m in seen if m[4] is None and m[5] is None) <= 2  # the fetch's first window
        assert len(chunks_to(seen, "c.0")) < 2 * 40


def test_a_cut_mid_snapshot_resumes_from_the_last_key_held() -> None:
    with filled() as net:
        sent = record_sends(net.nodes["a"].replica)
        net.add("c")
        until_chunks(net, sent, 6)
        net.partition({"a", "b"}, {"c"})
        net.run(3.0)  # fetches time out while cut off
        held = staged_entries(net.nodes["c"].replica._snaps["a.0"])
        assert 0 < held < 400
        asks = record_sends(net.nodes["c"].replica)
        net.heal()
        net.run(3.0)
        c = net.nodes["c"].replica
        assert net.contents("c") == net.contents("a") and not c.stale
        assert c.stats.snapshots_installed == 1
        first = next(m for m in asks if m[0] == "sfetch")
        assert first[4] is not None  # asked after the last key it held, not from scratch


def test_writes_during_a_snapshot_end_consistent_and_install_once() -> None:
    with filled() as net:
        net.add("c")
        for i in range(300):
            churn(net, i)
            net.run(0.003)
        net.run(3.0)
        c = net.nodes["c"].replica
        assert net.contents("c") == net.contents("a") == net.contents("b") and not c.stale
        assert c.stats.snapshots_installed == 1
        net.write("a", Put("after", 1))  # and it follows the log from there
        net.run(1.0)
        assert net.contents("c") == net.contents("a")


def test_a_new_master_mid_snapshot_restarts_it_cleanly() -> None:
    with filled() as net:
        sent = record_sends(net.nodes["a"].replica)
        net.add("c")
        new_master_midway(net, sent)
        c = net.nodes["c"].replica
        assert net.masters() == ["b"]
        assert net.contents("c") == net.contents("b") and not c.stale
        assert c.stats.snapshots_installed == 1


def test_tombstones_travel_in_the_stream() -> None:
    """A joiner gets the master's tombstones too (kept apart from the live keys, issue 20 item 6), so
    that a later merge cannot bring an erased key back through it."""
    with filled() as net:
        for i in range(0, 400, 2):
            net.write("a", Erase(f"k{i:04}"))
        net.run(1.0)
        a = net.nodes["a"].replica.state
        assert a.tombstones == 200
        net.add("c")
        net.run(3.0)
        c = net.nodes["c"].replica
        assert net.contents("c") == net.contents("a") and not c.stale
        assert c.state.tombstones == 200
        assert c.state.version("k0000").deleted  # type: ignore[union-attr]


def _join_mangled(net: SimNet, mangle: Callable[[list[Any]], bool]) -> tuple[Any, list[list[Any]], list[Exception]]:
    """Node c joins; the first chunk for it that ``mangle`` changes (True) is the only one changed.
    Returns c's replica, the chunk changed, and the StoreDecodeErrors c raised, as ElectedStore's
    receive loop counts them; when it raises, nothing of the snapshot is taken."""
    mangled: list[list[Any]] = []
    send = net.nodes["a"].replica.to_send

    def mangle_once() -> list[list[Any]]:
        out = send()
        for m in out:
            if not mangled and m[0] == "schunk" and m[2] == "c.0" and mangle(m):
                mangled.append(m)
        return out

    net.nodes["a"].replica.to_send = mangle_once  # type: ignore[method-assign]
    c = net.add("c").replica
    refused: list[Exception] = []
    handle = c.handle

    def counting(msg: Any, now: float, **kw: Any) -> None:
        try:
            handle(msg, now, **kw)
        except StoreDecodeError as exc:
            refused.append(exc)
            assert len(c.state) == 0 and c.stats.snapshots_installed == 0  # nothing of it taken

    c.handle = counting  # type: ignore[method-assign]
    return c, mangled, refused


@pytest.mark.parametrize("bad", [codec.encode(["not", "a", "version"]), b"\xff"], ids=["not-a-version", "not-cbor"])
def test_a_malformed_entry_installs_nothing_and_the_fetch_starts_over(bad: bytes) -> None:
    """The joiner decodes each entry as its chunk arrives: one malformed entry (a hostile or broken
    source) fails its chunk, nothing of the snapshot is installed, and the fetch starts over."""

    def mangle(m: list[Any]) -> bool:
        if not m[7]:
            return False
        key, _ = m[7][-1]
        m[7][-1] = [key, bad]  # valid CBOR but not a version, or not CBOR at all
        return True

    with filled() as net:
        c, mangled, refused = _join_mangled(net, mangle)
        staged = c._stage_pending

        def staging(now: float) -> None:  # (a chunk's entries are staged in a timer step after it came)
            malformed = c.stats.malformed
            staged(now)
            if c.stats.malformed > malformed:
                assert len(c.state) == 0 and c.stats.snapshots_installed == 0  # nothing of it taken
                assert "a.0" not in c._snaps  # the snapshot dropped: the fetch starts over

        c._stage_pending = staging  # type: ignore[method-assign]
        net.run(6.0)
        assert mangled and not refused and c.stats.malformed == 1
        assert net.contents("c") == net.contents("a") and not c.stale
        assert c.stats.snapshots_installed == 1


@pytest.mark.parametrize("row", [["w", "x", 1, []], ["w", 1, 1, [["inf", True]]], [1, 2], "w"],
                         ids=["n-not-int", "answer-number-not-int", "short", "not-a-row"])
def test_a_malformed_writer_row_installs_nothing_and_the_fetch_starts_over(row: Any) -> None:
    """The final burst's writer table is checked before anything is installed: a malformed row fails
    the snapshot (StoreDecodeError, as ElectedStore's receive loop counts it), and the fetch starts over."""

    def mangle(m: list[Any]) -> bool:
        if not (m[9] and m[10]):  # a chunk of the final burst with writer rows
            return False
        m[10] = [*m[10], row]
        return True

    with filled() as net:
        c, mangled, refused = _join_mangled(net, mangle)
        net.run(6.0)
        assert mangled and len(refused) == 1 and "bad applied entry" in str(refused[0])
        assert net.contents("c") == net.contents("a") and not c.stale
        assert c.stats.snapshots_installed == 1


def test_a_joiner_builds_the_changes_of_a_snapshot_only_when_they_are_wanted() -> None:
    """One change per key for a joiner's event streams; none built when nobody wants data changes,
    neither of the snapshot nor of the records applied after it, until someone does."""
    with filled() as net:
        c = net.add("c")
        c.replica.wants_data = lambda: False
        d = net.add("d")  # the default: wanted
        net.run(3.0)
        assert net.contents("c") == net.contents("d") == net.contents("a")
        assert c.replica.stats.snapshots_installed == d.replica.stats.snapshots_installed == 1
        assert c.changes == 0 and d.changes == 400
        net.write("a", Put("k0000", "new"))  # a record applied while nobody wants its change
        net.run(1.0)
        assert c.changes == 0 and d.changes == 401
        c.replica.wants_data = lambda: True
        net.write("a", Put("k0001", "new"))
        net.run(1.0)
        assert c.changes == 1 and d.changes == 402
        assert net.contents("c") == net.contents("d") == net.contents("a")


def test_a_joiner_decodes_each_chunk_as_it_comes_and_adopts_them_whole_at_the_end() -> None:
    """The entries are decoded into the state's own form as their chunks arrive; the final burst
    makes the state adopt them (the very dicts, no pass over the keys at the end: that one step
    stalled a joiner's event loop ~5 s per million keys)."""
    with filled() as net:
        sent = record_sends(net.nodes["a"].replica)
        c = net.add("c").replica
        until_chunks(net, sent, 4)
        staged = c._snaps["a.0"].staged
        assert 0 < len(staged.values) < 400 and all(isinstance(v, str) for v in staged.values.values())
        net.run(3.0)
        assert c.stats.snapshots_installed == 1 and net.contents("c") == net.contents("a")
        assert c.state._values is staged.values


def _sorts_at_most(monkeypatch: pytest.MonkeyPatch, keys: int) -> list[int]:
    """From now on the snapshot reader sorts at most ``keys`` keys in one step; returns the sizes it sorted."""
    monkeypatch.setattr(snapshot_stream, "SORT_SLICE", keys)
    sizes: list[int] = []

    def counted(items: Any, **kw: Any) -> list[Any]:
        out = sorted(items, **kw)
        sizes.append(len(out))
        return out

    monkeypatch.setattr(snapshot_stream, "sorted", counted, raising=False)
    return sizes


def test_a_large_key_order_is_taken_a_slice_at_a_time_and_the_join_ends_consistent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The master sorts its keys for a pass SORT_SLICE at a time, one slice per timer step (sorting
    a million random keys at once stalled it 0.6 s, per pass), and answers the fetch once the order
    is taken; the passes read the sorted runs merged. Writes and erases during the stream, and a lost
    chunk, still end with the joiner holding what the master holds."""
    with filled() as net:
        sizes = _sorts_at_most(monkeypatch, 64)
        a = net.nodes["a"].replica
        sent = record_sends(a)
        seen: list[list[Any]] = []

        def fifth(m: list[Any]) -> bool:
            if m[0] == "schunk" and m[2] == "c.0":
                seen.append(m)
                return len(seen) == 5
            return False

        dropped = dropping(net, "a", fifth)
        net.add("c")
        for i in range(200):
            churn(net, i)
            net.run(0.003)
        net.run(3.0)
        c = net.nodes["c"].replica
        assert len(dropped) == 1 and c.stats.snapshots_installed == 1
        assert net.contents("c") == net.contents("a") == net.contents("b") and not c.stale
        assert sizes and max(sizes) <= 64 and sum(sizes) >= 400  # the first order: 7 slices of 400 keys
        chunks = chunks_to(sent, "c.0")
        keys = [unpack(k) for m in chunks if m[4] is None and m[5] is None for k, _ in m[7]][:20]
        assert keys == sorted(keys)  # the runs are read merged, in key order


@pytest.mark.parametrize("since_seq", [0, 200])
def test_chunks_over_several_sorted_runs_cover_every_key_once_in_order(
        monkeypatch: pytest.MonkeyPatch, since_seq: int) -> None:
    """A reader whose order is several runs gives, chunk after chunk from any key, exactly the keys
    after it (written after ``since_seq``), in order, each once, and None as the cursor at the end."""
    monkeypatch.setattr(snapshot_stream, "SORT_SLICE", 50)
    monkeypatch.setattr(snapshot_stream, "SCAN_LIMIT", 30)
    state = VersionedState()
    for seq in range(1, 401):
        state.apply(Record(seq, (1, "a.0"), 1000 + seq, "a.0", "w", seq, ("put", f"k{(seq * 37) % 401:04}", seq, None)))
    reader = snapshot_stream.SnapshotReader(state)
    assert not reader.ready(True) and reader.taking
    steps = 1
    while not reader.step():
        steps += 1
    assert steps == 8 and len(reader._runs) == 8
    everything = sorted(k for k in state.packed_keys() if state.packed_row(k, since_seq) is not None)
    for start in (None, everything[0], everything[123], everything[-2]):
        got, after = [], start
        while True:
            entries, nxt, pos = reader.chunk(after, since_seq, 300)
            got += [k for k, _ in entries]
            assert pos == (400, (1, "a.0"))
            if nxt is None:
                break
            assert nxt > (after or b"")
            after = nxt
        assert got == [k for k in everything if start is None or k > start]


def test_writes_between_the_slices_of_a_key_order_do_not_make_the_source_sort_it_all_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The master takes its order a slice per timer step, 2 ms apart here, with writes (new keys
    among them) handled in between: once taken, the waiting pass is served from it brought up to
    date with the keys new since (sorted alone), not from the whole order sorted again in one step
    (a review saw that), and the joiner converges though the log keeps only 50 ops."""
    sizes: list[int] = []
    per_call: list[int] = []

    def counted(items: Any, **kw: Any) -> list[Any]:
        out = sorted(items, **kw)
        sizes.append(len(out))
        return out

    with filled(1500) as net:
        monkeypatch.setattr(snapshot_stream, "SORT_SLICE", 64)
        monkeypatch.setattr(snapshot_stream, "sorted", counted, raising=False)
        a = net.nodes["a"].replica
        real_deadline = type(a).next_deadline.fget
        assert real_deadline is not None
        last_tick = [0.0]

        def deadline(self: Any) -> float:  # a slice per timer step, 2 ms apart: messages come between
            if self is a and self._reader is not None and self._reader.taking:
                return last_tick[0] + 0.002
            return real_deadline(self)  # type: ignore[no-any-return]

        monkeypatch.setattr(type(a), "next_deadline", property(deadline))
        for name in ("tick", "handle"):
            real = getattr(a, name)

            def counting(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                before = len(sizes)
                if _name == "tick":
                    last_tick[0] = args[0]
                try:
                    return _real(*args, **kw)
                finally:
                    per_call.append(sum(sizes[before:]))

            monkeypatch.setattr(a, name, counting)
        net.add("c")
        for i in range(600):
            net.write("a", Put(f"k{(i * 7) % 1600:04}", i))
            net.run(0.003)
        net.run(5.0)
        c = net.nodes["c"].replica
        assert c.stats.snapshots_installed == 1 and net.contents("c") == net.contents("a") and not c.stale
        assert sum(sizes) >= 1500 and max(per_call) <= 64 + 100  # a slice, or a slice and the new keys


def test_a_fresh_pass_sorts_only_the_keys_new_since_the_order_was_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _sorts_at_most(monkeypatch, 50)
    state = VersionedState()
    seq = 0

    def put(key: str) -> None:
        nonlocal seq
        seq += 1
        state.apply(Record(seq, (1, "a.0"), 1000 + seq, "a.0", "w", seq, ("put", key, seq, None)))

    for i in range(300):
        put(f"k{(i * 37) % 301:04}")
    reader = snapshot_stream.SnapshotReader(state)
    while not reader.ready(True):
        reader.step()
    assert sum(sizes) == 300 and max(sizes) <= 50
    sizes.clear()
    for i in range(20):
        put(f"n{i:02}")  # new keys
        put(f"k{i:04}")  # and keys the order holds
    assert reader.ready(True) and sizes == [20]  # the new keys alone, into a run of their own
    keys, after = [], None
    while True:
        entries, after, pos = reader.chunk(after, 0, 500)
        keys += [k for k, _ in entries]
        if after is None:
            break
    assert keys == sorted(state.packed_keys()) and pos == state.position
    monkeypatch.setattr(versioned, "NEW_KEYS_NOTED", 5)  # past it: the order is taken anew
    sizes.clear()
    for i in range(20, 40):
        put(f"n{i:02}")
    assert not reader.ready(True) and reader.taking
    while not reader.step():
        pass
    assert sum(sizes) == 340 and reader.ready(True)


def _served_from_read_ahead(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many chunks each request found read ahead (ReadAhead.take's answers)."""
    took: list[int] = []
    take = snapshot_stream.ReadAhead.take

    def counted(self: snapshot_stream.ReadAhead, *args: Any) -> list[Any]:
        out = take(self, *args)
        took.append(len(out))
        return out

    monkeypatch.setattr(snapshot_stream.ReadAhead, "take", counted)
    return took


def test_the_source_reads_the_next_window_ahead_and_serves_it_as_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20: the source reads a requester's next window while the requester takes in the last
    one, and answers its ask with those chunks; writes meanwhile still end consistent."""
    took = _served_from_read_ahead(monkeypatch)
    with filled() as net:
        net.add("c")
        for i in range(200):
            churn(net, i)
            net.run(0.002)
        net.run(3.0)
        c = net.nodes["c"].replica
        assert net.contents("c") == net.contents("a") and not c.stale
        assert c.stats.snapshots_installed == 1
        # most windows came read ahead, whole (CONFIG: 2 chunks a window; an ask that comes back
        # sooner than READ_AHEAD_DELAY, as the simulated latency allows, finds less or nothing read)
        assert len(took) > 10 and took.count(CONFIG.snapshot_window) >= len(took) // 2
        assert not net.nodes["a"].replica._read_ahead  # the pass ended: nothing left read


def test_a_window_read_ahead_is_served_only_for_the_ask_it_was_read_for() -> None:
    with filled() as net:
        state = net.nodes["a"].replica.state
        reader = snapshot_stream.SnapshotReader(state)
        first, cursor, pos = reader.chunk(None, 0, 1500)
        assert cursor is not None
        epoch = net.nodes["a"].replica.epoch
        assert epoch is not None
        ahead = snapshot_stream.ReadAhead(epoch, None, cursor, 2, 1500, state.generation, 0.0, 2.0)
        assert not ahead.done
        ahead.step(reader)
        ahead.step(reader)
        assert ahead.done and len(ahead.chunks) == 2
        assert ahead.chunks[0][0][0][0] > first[-1][0]  # it goes on after the window served
        assert ahead.take(epoch, cursor, None, state.generation) == ahead.chunks
        assert ahead.take(epoch, first[0][0], None, state.generation) == []  # another cursor: a chunk was lost
        assert ahead.take(epoch, cursor, pos, state.generation) == []  # another pass
        assert ahead.take((epoch[0] + 1, epoch[1]), cursor, None, state.generation) == []  # another epoch
        assert ahead.take(epoch, cursor, None, state.generation + 1) == []  # the state was replaced


def test_a_window_read_ahead_for_a_requester_that_went_away_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    took = _served_from_read_ahead(monkeypatch)
    with filled() as net:
        sent = record_sends(net.nodes["a"].replica)
        net.add("c")
        until_chunks(net, sent, 6)
        net.kill("c")
        a = net.nodes["a"].replica
        net.run(0.05)
        assert a._read_ahead  # read for c, which will never ask
        net.run(CONFIG.fetch_timeout + 0.5)
        assert not a._read_ahead
        assert any(took)  # (c did take windows read ahead before it died)


def test_a_window_asked_for_and_not_read_goes_out_a_chunk_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The source answers an ask at once with one chunk (or with what it read ahead) and sends the
    rest of the window as its timers read it: it never reads more than a chunk in one step."""
    reads = [0]
    chunk = snapshot_stream.SnapshotReader.chunk

    def counted(self: snapshot_stream.SnapshotReader, *args: Any) -> Any:
        reads[0] += 1
        return chunk(self, *args)

    monkeypatch.setattr(snapshot_stream.SnapshotReader, "chunk", counted)
    with filled() as net:
        a = net.nodes["a"].replica
        in_tick = [False]
        sent_by: dict[str, int] = {"handle": 0, "tick": 0}
        per_ask: list[tuple[str, int]] = []  # (fetch or sfetch, the chunks its handling sent)
        most_read = [0]  # chunks read in one handle or tick, at most
        send, tick, handle = a._send, a.tick, a.handle

        def sending(msg: Any) -> None:
            if type(msg).__name__ == "SnapChunk" and msg.to == "c.0":
                sent_by["tick" if in_tick[0] else "handle"] += 1
            send(msg)

        def ticking(now: float, wall: float) -> None:
            in_tick[0] = True
            read = reads[0]
            try:
                tick(now, wall)
            finally:
                in_tick[0] = False
                most_read[0] = max(most_read[0], reads[0] - read)

        def handling(msg: Any, now: float, **kw: Any) -> None:
            before, read = sent_by["handle"], reads[0]
            handle(msg, now, **kw)
            most_read[0] = max(most_read[0], reads[0] - read)
            if msg[0] in ("fetch", "sfetch") and msg[2] == "c.0":
                per_ask.append((msg[0], sent_by["handle"] - before))

        a._send, a.tick, a.handle = sending, ticking, handling  # type: ignore[method-assign]
        net.add("c")
        net.run(3.0)
        assert net.contents("c") == net.contents("a") and not net.nodes["c"].replica.stale
        assert per_ask[0] == ("fetch", 1)  # the first window: its first chunk at once, ...
        assert sent_by["tick"] >= CONFIG.snapshot_window - 1  # ... the rest (and more) as the timers read them
        assert most_read[0] == 1  # (the code before read a window, 2 chunks here, per ask)


def test_chunks_owed_to_one_joiner_go_on_while_the_key_order_is_taken_for_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A review's case: the source's timers took a new key order (another joiner's fresh pass) or
    read ahead, not both, so a joiner owed chunks got none until the order was taken (with a large
    state, longer than fetch_timeout: its owed window was dropped, a chunk per fetch_timeout)."""
    monkeypatch.setattr(replica_serving, "MAX_READ_AHEAD", 0)  # nothing read ahead: all but a window's first chunk owed
    with filled(1200) as net:
        a = net.nodes["a"].replica
        sent = record_sends(a)
        net.add("c")
        until_chunks(net, sent, 2)  # a key order taken; c's pass under way
        net.kill("c")  # from here on the requesters are played by hand
        cursor = chunks_to(sent, "c.0")[-1][8]
        epoch = a.epoch
        assert cursor is not None and epoch is not None
        sizes = _sorts_at_most(monkeypatch, 16)
        monkeypatch.setattr(versioned, "NEW_KEYS_NOTED", 0)
        net.write("a", Put("new", 1))  # more new keys than noted: a fresh pass takes the order anew
        a.handle(encode(SnapFetch(epoch, "x.0", a.id, cursor, None, 4)), net.now)  # x goes on from c's cursor
        assert len(chunks_to(sent, "x.0")) == 0 and a._read_ahead["x.0"].owed == 3  # (sent at the drain)
        a.handle(encode(Fetch(epoch, "y.0", a.id, None)), net.now)  # y begins: the order is taken anew
        assert a._taking_order
        a.to_send()
        for _ in range(3):
            a.tick(net.now, 1_000_000 + net.now)
            a.to_send()
        assert a._taking_order and len(sizes) == 3  # three slices of the order, one a tick
        assert len(chunks_to(sent, "x.0")) == 4  # x's first chunk, then an owed one each tick


def test_a_requester_s_larger_window_is_read_ahead_only_up_to_the_source_s_own() -> None:
    """A review's case: a requester asking for 8 chunks at a time (its own snapshot_window) from a
    source whose window is 2 gets 2 read ahead, not 8 held for it (64-chunk windows read ahead for
    4 requesters held 64 MB); the rest of each window is owed and sent as read, none lost."""
    with filled() as net:
        a = net.nodes["a"].replica
        sent = record_sends(a)
        net.add("c")
        until_chunks(net, sent, 2)
        net.kill("c")  # from here on the requester is played by hand
        epoch = a.epoch
        assert epoch is not None
        now = net.now

        def ask(after: bytes) -> int:
            before = len(chunks_to(sent, "x.0"))
            a.handle(encode(SnapFetch(epoch, "x.0", a.id, after, None, 8)), now)
            a.to_send()
            return len(chunks_to(sent, "x.0")) - before

        def run_timers(seconds: float) -> None:
            nonlocal now
            end = now + seconds
            while (now := max(now, min(a.next_deadline, end))) < end:
                a.tick(now, 1_000_000 + now)
                a.to_send()

        assert ask(chunks_to(sent, "c.0")[-1][8]) == 1  # nothing read ahead for x: one chunk at once ...
        assert a._read_ahead["x.0"].owed == 7
        run_timers(0.1)  # ... the 7 owed as read, then the next window read ahead
        assert len(chunks_to(sent, "x.0")) == 8
        assert a._read_ahead["x.0"].done and len(a._read_ahead["x.0"].chunks) == CONFIG.snapshot_window == 2
        assert ask(chunks_to(sent, "x.0")[-1][8]) == 2  # the 2 read ahead at once, the other 6 owed
        assert a._read_ahead["x.0"].owed == 6
        run_timers(0.1)
        got = chunks_to(sent, "x.0")
        assert len(got) == 16 and all(m[4] == prev[8] for prev, m in zip(got, got[1:], strict=False))  # contiguous


def test_a_long_owed_window_is_paid_in_full_however_slow_the_timer_steps() -> None:
    """A review's case: an owed window was dropped fetch_timeout after its ask (as if its requester
    were gone), so a 60-chunk window paid a chunk per slow timer step (a source taking a key order
    for another joiner: ~70 ms a step) lost its tail, and the requester waited fetch_timeout to ask
    again. Paying a chunk now keeps it; two requesters owed chunks take turns."""
    with filled() as net:
        a = net.nodes["a"].replica
        sent = record_sends(a)
        net.add("c")
        until_chunks(net, sent, 2)
        net.kill("c")
        epoch = a.epoch
        assert epoch is not None
        now = net.now
        cursor = chunks_to(sent, "c.0")[-1][8]
        for requester in ("x.0", "y.0"):
            a.handle(encode(SnapFetch(epoch, requester, a.id, cursor, None, 30)), now)
        a.to_send()
        order: list[str] = []
        for _ in range(58):
            now += 0.1  # slow steps: 5.8 s in all, fetch_timeout is 2
            before = {r: len(chunks_to(sent, r)) for r in ("x.0", "y.0")}
            a.tick(now, 1_000_000 + now)
            a.to_send()
            order += [r for r in ("x.0", "y.0") if len(chunks_to(sent, r)) > before[r]]
        assert len(chunks_to(sent, "x.0")) == len(chunks_to(sent, "y.0")) == 30
        assert order[:6] == ["x.0", "y.0"] * 3  # in turns
