"""``DiskState`` (``resident="disk"``) against the memory-resident ``VersionedState`` it stands for.

The same records, merges and snapshots go to both; every read must agree, before and after a commit,
after a reopen, and across the two forms' files (either opens the other's)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from broker_mqtt.store.errors import BackendError, StoreDecodeError
from broker_mqtt.store.packing import pack
from broker_mqtt.store.snapshot_stream import Incoming, SnapshotReader
from broker_mqtt.store.state_merge import merge
from broker_mqtt.store.versioned import Change, Record, Version, VersionedState
from broker_mqtt.store.versioned_disk import DiskState, open_disk_state
from broker_mqtt.store.versioned_sqlite import open_state

EPOCH = (1, "n")
KEYS: list[Any] = [0, 1, 2, 5, 30, 1000, "a", "b", "zz", (1, 2), -3]


def _record(state: VersionedState, ops: list[tuple[Any, ...]], *, writer: str = "w") -> Record:
    seq = state.last_seq + 1
    op = ops[0] if len(ops) == 1 else ("many", ops)
    return Record(seq, EPOCH, 100 + seq, f"o{seq % 3}", writer, seq, op, None)


def _random_ops(rng: random.Random) -> list[tuple[Any, ...]]:
    ops: list[tuple[Any, ...]] = []
    for _ in range(rng.randint(1, 5)):
        key = rng.choice(KEYS)
        kind = rng.choice(["put", "put", "put", "erase", "expire", "forget", "push", "pop", "clear"])
        if kind == "put":
            ops.append(("put", key, rng.choice([rng.random(), "v" * rng.randint(0, 40), [1, 2]]),
                        rng.choice([None, None, float(rng.randint(1, 99))])))
        elif kind == "push":
            ops.append(("push", key, rng.randint(0, 9), None))
        elif kind == "pop":
            ops.append(("pop", key, None))
        elif kind == "clear":
            if rng.random() < 0.2:
                ops.append(("clear",))
        else:
            ops.append((kind, key))
    return ops or [("noop",)]


def _same(mem: VersionedState, disk: VersionedState, *, reopened: bool = False) -> None:
    """Every read of the two states agrees (tombstone order aside: the disk's is by erase time).
    ``reopened``: ``disk`` was opened from its file since (which, as the memory form's, does not know
    which tombstones were forgotten when: its ``forgot_seq`` is its last seq)."""
    assert sorted(map(repr, disk.versions())) == sorted(map(repr, mem.versions()))
    assert sorted(map(repr, disk.items())) == sorted(map(repr, mem.items()))
    assert (len(disk), disk.tombstones) == (len(mem), mem.tombstones)
    assert disk.next_expiry() == mem.next_expiry() or (
        disk.next_expiry() is not None and mem.next_expiry() is not None
        and disk.next_expiry()[0] == mem.next_expiry()[0])  # type: ignore[index]
    assert sorted(map(repr, disk.old_tombstones(10**12, 100))) == sorted(map(repr, mem.old_tombstones(10**12, 100)))
    assert disk.largest_erased_int(1 << 64) == mem.largest_erased_int(1 << 64)
    assert disk.largest_erased_int(30) == mem.largest_erased_int(30)
    for key in KEYS:
        assert disk.version(key) == mem.version(key)
        assert disk.value(key, "absent") == mem.value(key, "absent")
        assert disk.exists(key) == mem.exists(key)
        k = pack(key)
        assert disk.packed_row(k) == mem.packed_row(k)
        assert disk.packed_row(k, 10) == mem.packed_row(k, 10)
    assert (disk.last_seq, disk.lineage, disk.max_hlc) == (mem.last_seq, mem.lineage, mem.max_hlc)
    assert disk.forgot_seq == (disk.last_seq if reopened else mem.forgot_seq)
    assert {w: (a.n, a.seq, a.results) for w, a in disk.applied.items()} == {
        w: (a.n, a.seq, a.results) for w, a in mem.applied.items()}


@pytest.mark.parametrize("seed", range(12))
def test_random_records_read_the_same_as_in_memory_and_after_a_reopen(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    mem = VersionedState()
    disk = open_disk_state(tmp_path / "s.db")
    try:
        for step in range(150):
            ops = _random_ops(rng)
            record = _record(mem, ops, writer=rng.choice(["w1", "w2"]))
            got, want = disk.apply(record), mem.apply(record)
            if ("clear",) in ops:  # (a clear's changes come in key order on disk, in write order in memory)
                got, want = sorted(got, key=repr), sorted(want, key=repr)
            assert got == want
            if rng.random() < 0.3:
                disk.commit()
            if step % 37 == 0:
                _same(mem, disk)
        _same(mem, disk)
        disk.commit()
        disk.close()
        with pytest.raises(BackendError, match="closed"):
            disk.value(1)
        disk = open_disk_state(tmp_path / "s.db")
        _same(mem, disk, reopened=True)
        disk.close()
        memform = open_state(tmp_path / "s.db")  # the memory-resident form reads the disk form's file
        try:
            _same(mem, memform, reopened=True)
        finally:
            memform.close()
    finally:
        disk.close()


def test_what_was_not_committed_is_not_in_the_file(tmp_path: Path) -> None:
    disk = open_disk_state(tmp_path / "s.db")
    disk.apply(_record(disk, [("put", "a", 1, None)]))
    disk.commit()
    disk.apply(_record(disk, [("put", "b", 2, None), ("erase", "a")]))
    assert disk.items() == [("b", 2)]  # (applied, not committed: read back all the same)
    disk.close()
    again = open_disk_state(tmp_path / "s.db")
    try:
        assert (again.items(), again.last_seq, len(again), again.tombstones) == ([("a", 1)], 1, 1, 0)
    finally:
        again.close()


def test_a_memory_form_file_is_brought_to_the_disk_form_and_back(tmp_path: Path) -> None:
    rng = random.Random(3)
    path = tmp_path / "s.db"
    memform = open_state(path)
    for _ in range(80):
        memform.apply(_record(memform, _random_ops(rng)))
    memform.commit()
    memform.close()
    mem = open_state(path)
    disk = open_disk_state(path)  # a file the memory form wrote: its columns are computed
    try:
        _same(mem, disk, reopened=True)
        for _ in range(40):
            record = _record(mem, _random_ops(rng))
            assert sorted(disk.apply(record), key=repr) == sorted(mem.apply(record), key=repr)
        disk.commit()
    finally:
        disk.close()
        mem.close()
    memform = open_state(path)  # and the memory form continues from what the disk form wrote
    try:
        assert memform.last_seq == 120
        memform.apply(_record(memform, [("put", "late", 1, None)]))
        memform.commit()
    finally:
        memform.close()
    disk = open_disk_state(path)  # written by the memory form again: computed again
    try:
        assert disk.value("late") == 1 and disk.last_seq == 121
        memform = open_state(path)
        try:
            assert len(disk) == len(memform)
        finally:
            memform.close()
    finally:
        disk.close()


def test_a_merge_and_a_replace_give_the_same_state_and_changes(tmp_path: Path) -> None:
    rng = random.Random(9)
    a, b = VersionedState(), VersionedState()
    for s in (a, b):
        for _ in range(60):
            s.apply(_record(s, _random_ops(rng)))
    mem = VersionedState()
    disk = open_disk_state(tmp_path / "s.db")
    try:
        for _ in range(30):
            record = _record(mem, _random_ops(rng))
            mem.apply(record)
            disk.apply(record)
        versions, applied, _ = merge(a, b)
        kwargs: dict[str, Any] = {"last_seq": 500, "lineage": [((2, "m"), 1)], "applied": applied, "max_hlc": 900}
        got, want = disk.replace(versions, **kwargs), mem.replace(versions, **kwargs)
        assert got and any(not c.exists for c in got)
        assert sorted(got, key=repr) == sorted(want, key=repr)
        _same(mem, disk)
        disk.commit()
        disk.close()
        disk = open_disk_state(tmp_path / "s.db")
        _same(mem, disk, reopened=True)
    finally:
        disk.close()


def _stream(source: VersionedState, joiner: VersionedState, *, budget: int, writes: random.Random | None = None
            ) -> dict[str, Any]:
    """Stream ``source`` into an Incoming staged in ``joiner``'s file, pass after pass as the replicas
    do (``writes``: the source changes between chunks), and return the install's parts."""
    reader = SnapshotReader(source)
    inc = Incoming("src", EPOCH, False, file=joiner)
    while True:
        since = inc.since
        entries, nxt, pos = reader.chunk(inc.cursor, 0 if since is None else since[0], budget)
        inc.take(entries, nxt, pos)
        inc.step()
        if writes is not None and writes.random() < 0.5:
            source.apply(_record(source, _random_ops(writes)))
        if nxt is None:
            if inc.since is not None and inc.low is not None and inc.low[0] == source.last_seq:
                break  # a pass with nothing written meanwhile: the state as of its position
            inc.next_pass()
            if inc.since is not None and inc.since[0] >= source.last_seq - 1 and writes is not None:
                writes = None  # let the passes converge
    inc.stage([], [[w, a.n, a.seq, []] for w, a in source.applied.items()])
    return inc.parts(reader.header())


@pytest.mark.parametrize("source_on_disk", [False, True])
def test_a_snapshot_streams_from_and_into_files_in_chunks(tmp_path: Path, source_on_disk: bool) -> None:
    rng = random.Random(11)
    source: VersionedState = open_disk_state(tmp_path / "src.db") if source_on_disk else VersionedState()
    joiner = open_disk_state(tmp_path / "j.db")
    try:
        for i in range(400):
            source.apply(_record(source, [("put", f"k{i:04}", "x" * 50, None)]))
        for _ in range(40):
            source.apply(_record(source, _random_ops(rng)))
        joiner.apply(_record(joiner, [("put", "stale", 1, None)]))
        joiner.commit()
        parts = _stream(source, joiner, budget=1024, writes=random.Random(2))
        assert parts["entries"] is None  # nothing decoded into memory: the rows are in the joiner's file
        changes = joiner.adopt(**parts, report=True)
        assert Change("stale", True, 1, False, None, None) in changes
        assert (len(joiner), joiner.tombstones) == (len(source), source.tombstones)  # counted as staged
        joiner.commit()
        assert sorted(map(repr, joiner.versions())) == sorted(map(repr, source.versions()))
        joiner.close()
        joiner = open_disk_state(tmp_path / "j.db")
        assert sorted(map(repr, joiner.versions())) == sorted(map(repr, source.versions()))
        assert (len(joiner), joiner.tombstones) == (len(source), source.tombstones)
    finally:
        joiner.close()
        if isinstance(source, DiskState):
            source.close()


def test_a_stale_staging_is_never_installed_as_an_empty_state(tmp_path: Path) -> None:
    source = VersionedState()
    for i in range(50):
        source.apply(_record(source, [("put", i, "x" * 40, None)]))
    joiner = open_disk_state(tmp_path / "j.db")
    try:
        joiner.apply(_record(joiner, [("put", "mine", 1, None)]))
        reader = SnapshotReader(source)
        inc = Incoming("src", EPOCH, False, file=joiner)
        entries, nxt, pos = reader.chunk(None, 0, 400)
        inc.take(entries, nxt, pos)
        inc.step()
        joiner.begin_staging()  # another staging began: this one's rows are gone
        entries, nxt, pos = reader.chunk(nxt, 0, 400)
        inc.take(entries, nxt, pos)
        with pytest.raises(StoreDecodeError, match="start over"):
            inc.step()
        with pytest.raises(StoreDecodeError, match="start over"):
            joiner.adopt(None, last_seq=50, lineage=[(EPOCH, 1)], applied={}, max_hlc=0, staged=inc.token)
        assert joiner.items() == [("mine", 1)]
    finally:
        joiner.close()


def test_a_failed_write_raises_backend_error_and_the_file_keeps_its_last_commit(tmp_path: Path) -> None:
    disk = open_disk_state(tmp_path / "s.db")
    try:
        disk.apply(_record(disk, [("put", "a", 1, None)]))
        disk.commit()
        other = sqlite3.connect(tmp_path / "s.db", timeout=0)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the file: the next write cannot begin
        try:
            with pytest.raises(BackendError, match="locked"):
                disk.apply(_record(disk, [("put", "b", 2, None)]))
        finally:
            other.execute("ROLLBACK")
            other.close()
    finally:
        disk.close()
    again = open_disk_state(tmp_path / "s.db")
    try:
        assert again.items() == [("a", 1)] and again.last_seq == 1
    finally:
        again.close()


def test_versions_and_rows_after_read_in_key_order(tmp_path: Path) -> None:
    disk = open_disk_state(tmp_path / "s.db")
    try:
        keys = [f"k{i:03}" for i in range(100)]
        for key in random.Random(1).sample(keys, 100):
            disk.apply(_record(disk, [("put", key, 1, None)]))
        disk.apply(_record(disk, [("erase", "k050")]))
        rows = disk.rows_after(pack("k010"), 50, 80, 5)
        assert [k for k, _ in rows] == [pack(f"k{i:03}") for i in range(11, 16)]
        assert [v is not None for _, v in rows] == [
            50 < disk.version(f"k{i:03}").seq <= 80 for i in range(11, 16)]  # type: ignore[union-attr]
        assert disk.packed_version(pack("k050")) == Version(None, 201, "o2", 101, True)
    finally:
        disk.close()


def test_keys_a_peer_packed_out_of_order_or_twice_are_staged_once_and_counted_right(tmp_path: Path) -> None:
    """A first pass's keys are counted without a lookup only while they come in order: a peer whose
    packing is not canonical (1 as ``0x18 0x01``) may send a key twice or out of order."""
    joiner = open_disk_state(tmp_path / "j.db")
    try:
        inc = Incoming("src", EPOCH, False, file=joiner)
        one = pack(Version("a", 5, "o", 1).to_wire())
        two = pack(Version(None, 6, "o", 2, True).to_wire())
        inc.take([(pack(0), one), (b"\x18\x01", one), (pack(1), two)], pack(1), (2, EPOCH))
        inc.step()
        inc.take([(pack(0), two), (pack(5), one)], None, (2, EPOCH))
        inc.step()
        joiner.adopt(**inc.parts((2, [(EPOCH, 1)], 6)), report=False)
        assert (len(joiner), joiner.tombstones) == (1, 2)
        assert joiner.version(1) == Version(None, 6, "o", 2, True) and joiner.get(5) == "a"
    finally:
        joiner.close()
