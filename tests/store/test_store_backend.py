"""Backends: the same contract for MemoryBackend and SQLiteBackend; SQLite durability."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _sqlite_tracking import is_closed, track_connections

from broker_mqtt.store import Backend, BackendError, Entry, MemoryBackend, NoSuchKey, SQLiteBackend
from broker_mqtt.store.packing import pack as _pack
from broker_mqtt.store.versioned_sqlite import open_state


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    b: Backend = MemoryBackend() if request.param == "memory" else SQLiteBackend(tmp_path / "s.db")
    yield b
    b.close()


def test_is_a_backend(backend: Backend) -> None:
    assert isinstance(backend, Backend)


def test_put_get_exists_keys(backend: Backend) -> None:
    assert len(backend) == 0 and backend.keys() == [] and not backend.exists("a")
    with pytest.raises(NoSuchKey) as err:
        backend.get("a")
    assert err.value.key == "a"
    backend.put("a", 1)
    backend.put(["compound", 2], {"x": [1, 2.5, b"raw", None]})
    backend.put("a", "replaced")
    assert backend.get("a") == "replaced"
    assert backend.get(["compound", 2]) == {"x": [1, 2.5, b"raw", None]}
    assert backend.exists(("compound", 2))  # keys compare by encoding: tuple == list
    assert not backend.exists(1.0) and not backend.exists(True)
    assert sorted(map(str, backend.keys())) == sorted(map(str, ["a", ["compound", 2]]))
    assert len(backend) == 2


def test_sets_and_copies(backend: Backend) -> None:
    backend.put("s", {1, 2, 3})
    value = backend.get("s")
    assert value == {1, 2, 3}
    value.add(4)  # a copy: the stored value does not change
    assert backend.get("s") == {1, 2, 3}


def test_keys_of_every_kind_compare_by_encoding(backend: Backend) -> None:
    keys = ["1", 1, 1.0, True, b"1", None, 2**70, -0.0, 0.0, ("t", 1), frozenset({3, 1, 2})]
    for i, key in enumerate(keys):
        backend.put(key, i)
    assert len(backend) == len(keys)  # 1, 1.0 and True are equal in Python, not here
    for i, key in enumerate(keys):
        assert backend.get(key) == i and backend.exists(key)
    assert backend.get(["t", 1]) == 9 and backend.get({1, 2, 3}) == 10  # list == tuple, sets by content
    assert sorted(map(repr, backend.keys())) == sorted(map(repr, [*keys[:9], ["t", 1], {1, 2, 3}]))
    assert backend.erase(1) and backend.exists(1.0) and backend.exists(True) and not backend.exists(1)


def test_values_come_back_equal_and_as_fresh_copies(backend: Backend) -> None:
    values = ["s", 7, 2**80, 1.5, True, None, b"b", [1, [2]], {"a": {"b": 1}}, (1, 2)]
    for i, value in enumerate(values):
        backend.put(i, value)
    got = [backend.get(i) for i in range(len(values))]
    assert got == [*values[:-1], [1, 2]] and type(got[4]) is bool and type(got[2]) is int
    got[7][1].append(3)
    got[8]["a"]["c"] = 2
    assert backend.get(7) == [1, [2]] and backend.get(8) == {"a": {"b": 1}}
    assert [e.value for e in sorted(backend.snapshot(), key=lambda e: e.key)][7:9] == [[1, [2]], {"a": {"b": 1}}]


def test_erase_clear(backend: Backend) -> None:
    backend.put("a", 1)
    backend.put("b", 2)
    assert backend.erase("a") is True
    assert backend.erase("a") is False
    assert backend.keys() == ["b"]
    backend.clear()
    assert len(backend) == 0


def test_expire_and_next_expiry(backend: Backend) -> None:
    assert backend.next_expiry() is None
    backend.put("forever", 1)
    backend.put("soon", 2, 10.0)
    backend.put("later", 3, 20.0)
    assert backend.next_expiry() == 10.0
    assert backend.get_entry("soon") == Entry("soon", 2, 10.0)
    assert backend.expire(9.9) == []
    assert backend.expire(10.0) == ["soon"]
    assert backend.next_expiry() == 20.0
    backend.put("later", 4)  # a write without expiry makes it permanent
    assert backend.next_expiry() is None
    assert backend.expire(100.0) == []
    assert sorted(backend.keys()) == ["forever", "later"]


def test_snapshot_iteration_replace_all(backend: Backend) -> None:
    backend.put("a", 1, 5.0)
    backend.put("b", [2])
    assert sorted(backend.snapshot(), key=lambda e: e.key) == [Entry("a", 1, 5.0), Entry("b", [2])]
    assert sorted(e.key for e in backend) == ["a", "b"]
    backend.replace_all([Entry("c", 3), Entry("d", 4)], seq=7)
    assert sorted(backend.keys()) == ["c", "d"] and backend.last_seq == 7


def test_last_seq_recorded_with_mutations(backend: Backend) -> None:
    assert backend.last_seq == 0
    backend.put("a", 1, seq=1)
    backend.put("b", 1)  # without seq: unchanged
    assert backend.last_seq == 1
    backend.erase("a", seq=2)
    backend.clear(seq=3)
    backend.expire(0.0, seq=4)
    assert backend.last_seq == 4
    backend.set_last_seq(9)
    assert backend.last_seq == 9


def test_unencodable_value_is_backend_error(backend: Backend) -> None:
    with pytest.raises(BackendError):
        backend.put("a", object())
    assert not backend.exists("a")


def test_sqlite_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    b = SQLiteBackend(path)
    b.put("a", {"n": 1}, 50.0, seq=1)
    b.put(("k", 1), {1, 2}, seq=2)
    b.erase("nothing", seq=3)
    b.close()
    b = SQLiteBackend(path)
    try:
        assert b.last_seq == 3
        assert b.get_entry("a") == Entry("a", {"n": 1}, 50.0)
        assert b.get(["k", 1]) == {1, 2}
        assert b.expire(50.0) == ["a"]
    finally:
        b.close()


def test_sqlite_is_wal_and_synchronous_full(tmp_path: Path) -> None:
    b = SQLiteBackend(tmp_path / "w.db")
    b.close()
    db = sqlite3.connect(tmp_path / "w.db")
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()
    b = SQLiteBackend(tmp_path / "w.db")
    try:
        assert b._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        b.close()


@pytest.mark.parametrize("opener", [SQLiteBackend, open_state], ids=["SQLiteBackend", "VersionedState"])
def test_corrupt_file_is_backend_error_and_leaves_no_connection_open(
        opener: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """VersionedState is the elected stores' (and queues') SQLite persistence: the same guarantee."""
    path = tmp_path / "bad.db"
    path.write_bytes(b"this is not a database" * 100)
    opened = track_connections(monkeypatch)
    with pytest.raises(BackendError):
        opener(path)
    assert opened and all(is_closed(db) for db in opened)


def test_sqlite_backend_close_is_idempotent_and_closes_the_file(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    opened = track_connections(monkeypatch)
    b = SQLiteBackend(tmp_path / "c.db")
    b.close()
    b.close()
    assert len(opened) == 1 and is_closed(opened[0])
    with pytest.raises(BackendError):
        b.get("a")


def test_versioned_state_bad_header_is_backend_error_and_leaves_no_connection_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.db"
    with contextlib.closing(open_state(path)):
        pass  # creates the schema
    with contextlib.closing(sqlite3.connect(path)) as db:  # a valid SQLite file whose header is not one
        db.execute("INSERT INTO meta (name, v) VALUES ('state', ?)", (_pack({"seq": 1}),))
        db.commit()
    opened = track_connections(monkeypatch)
    with pytest.raises(BackendError, match="cannot open"):
        open_state(path)
    assert opened and all(is_closed(db) for db in opened)


def test_sqlite_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    script = textwrap.dedent(f"""
        import sys, time
        from broker_mqtt.store import SQLiteBackend
        b = SQLiteBackend({str(path)!r})
        for i in range(50):
            b.put(i, "v" * i, seq=i + 1)
            print(i, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        acked = [int(proc.stdout.readline()) for _ in range(50)]
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    b = SQLiteBackend(path)
    try:
        assert sorted(b.keys()) == acked and b.last_seq == 50
        assert b.get(49) == "v" * 49
    finally:
        b.close()


def test_a_full_file_is_the_backend_error_it_is_and_the_file_keeps_what_was_committed(tmp_path: Path) -> None:
    """SQLite rolls a transaction back by itself when the file is full at its commit; the ROLLBACK
    after it failed ("no transaction is active") and hid the cause. ``max_page_count`` makes the
    file full, as a full disk does."""
    from broker_mqtt.store.history import Record

    state = open_state(tmp_path / "s.db")
    try:
        state.apply(Record(1, (1, "n"), 10, "o", "w", 1, ("put", "small", 1, None)))
        state.commit()
        db = state._file._db  # type: ignore[union-attr]
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        db.execute(f"PRAGMA max_page_count = {pages}")
        state.apply(Record(2, (1, "n"), 20, "o", "w", 2, ("put", "big", "x" * 200_000, None)))
        with pytest.raises(BackendError, match="database or disk is full"):
            state.commit()
    finally:
        state.close()
    again = open_state(tmp_path / "s.db")
    try:
        assert again.items() == [("small", 1)] and again.last_seq == 1
    finally:
        again.close()
