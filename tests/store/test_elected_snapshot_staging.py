"""A SQLite joiner stages a streamed snapshot in its file chunk by chunk, and the install takes the staged
rows in one step (a table renamed), not by writing every entry again in one transaction at the end
(5-6 s of stalled event loop per million keys). The file then holds exactly what the state holds."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from _elected_sim import SimNet, record_sends
from test_elected_snapshot_stream import chunks_to, churn, filled, new_master_midway, until_chunks

from broker_mqtt.store.commands import Erase, Put
from broker_mqtt.store.errors import BackendError
from broker_mqtt.store.history import Version
from broker_mqtt.store.packing import pack
from broker_mqtt.store.snapshot_stream import Incoming
from broker_mqtt.store.versioned import VersionedState
from broker_mqtt.store.versioned_sqlite import open_state


def versions(state: VersionedState) -> dict[Any, Any]:
    return {(tuple(k) if isinstance(k, list) else k): v.to_wire() for k, v in state.versions()}


def reopened(path: Path) -> dict[Any, Any]:
    state = open_state(path)
    try:
        return versions(state)
    finally:
        state.close()


def tables(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        db.close()


class FileCalls:
    """Stands between a state and its file: records the ``stage`` and ``write`` calls, with the rows
    they carried, and passes them on."""

    def __init__(self, state: VersionedState) -> None:
        self.file: Any = state._file
        self.stages: list[tuple[int, int, bool]] = []  # (rows, gone, fresh)
        self.writes: list[tuple[int, bool, bool]] = []  # (rows, replace_all, from_staged)
        state._file = self

    def stage(self, rows: Any, gone: list[Any], *, fresh: bool) -> None:
        rows = list(rows)
        self.stages.append((len(rows), len(gone), fresh))
        self.file.stage(rows, gone, fresh=fresh)

    def write(self, header: Any, rows: Any, gone: list[Any], *, replace_all: bool, from_staged: bool = False) -> None:
        rows = list(rows)
        self.writes.append((len(rows), replace_all, from_staged))
        self.file.write(header, rows, gone, replace_all=replace_all, from_staged=from_staged)

    def close(self) -> None:
        self.file.close()


def join(net: SimNet, path: Path) -> tuple[Any, FileCalls]:
    """Start node c on the SQLite file ``path``, recording what its file is asked to do."""
    node = net.add("c", path)
    return node.replica, FileCalls(node.replica.state)


def test_a_sqlite_joiner_stages_each_chunk_and_its_install_writes_no_row_again(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with filled() as net:
        sent = record_sends(net.nodes["a"].replica)
        c, calls = join(net, path)
        net.run(3.0)
        assert net.contents("c") == net.contents("a") and not c.stale
        assert c.stats.snapshots_installed == 1
        chunks = len(chunks_to(sent, "c.0"))
        assert chunks > 10
        # every chunk's rows staged as it came, in a staging begun once
        assert sum(rows for rows, _, _ in calls.stages) == 400
        assert [fresh for _, _, fresh in calls.stages].count(True) == 1
        # the install took the staged table: no commit rewrote every row
        assert [w for w in calls.writes if w[2]] == [(0, False, True)]
        assert not [w for w in calls.writes if w[1]]
        assert "staging" not in tables(path)
        mine = versions(c.state)
        assert mine == versions(net.nodes["a"].replica.state)
        net.close()
        assert reopened(path) == mine


def test_writes_erases_and_a_cut_during_the_stream_leave_the_file_as_the_state(tmp_path: Path) -> None:
    """Passes of changes stage live keys, tombstones and drops; a cut resumes into the same staging;
    records applied right after the install are committed on top of the taken table."""
    path = tmp_path / "c.db"
    with filled() as net:
        sent = record_sends(net.nodes["a"].replica)
        c, calls = join(net, path)
        for i in range(200):
            churn(net, i)
            net.run(0.003)
            if len(chunks_to(sent, "c.0")) == 8 and net.groups is None:
                net.partition({"a", "b"}, {"c"})
        net.run(3.0)  # c's fetch times out while cut off
        net.heal()
        for i in range(100):
            net.write("a", Erase(f"k{i * 3:04}") if i % 4 == 0 else Put(f"n{i}", i))
            net.run(0.002)
        net.run(3.0)
        a = net.nodes["a"].replica
        assert net.contents("c") == net.contents("a") and not c.stale
        assert c.stats.snapshots_installed == 1 and a.state.tombstones > 0
        assert [fresh for _, _, fresh in calls.stages].count(True) == 1  # the cut resumed, not restarted
        assert len([w for w in calls.writes if w[2]]) == 1 and not [w for w in calls.writes if w[1]]
        for i in range(50):  # and what it applies after the install goes to the taken table
            net.write("a", Erase(f"n{i}") if i % 3 == 0 else Put(f"k{i:04}", -i))
        net.run(1.0)
        assert len(calls.writes) > 1 and not [w for w in calls.writes if w[1]]
        mine = versions(c.state)
        assert mine == versions(a.state)
        net.close()
        assert reopened(path) == mine


def test_a_key_a_later_chunk_drops_is_dropped_from_the_staged_rows_too(tmp_path: Path) -> None:
    """A final burst names a key that is gone (forgotten since its pass) with no version: the staged
    row goes too, and the file after the install holds only what the state holds."""
    state = open_state(tmp_path / "s.db")
    try:
        calls = FileCalls(state)
        inc = Incoming("a.0", (1, "a.0"), False, file=state)
        live, dead = Version("x", 5, "a.0", 1, False, None), Version(None, 6, "a.0", 2, True, None)
        inc.take([(pack("k1"), pack(live.to_wire())), (pack("k2"), pack(dead.to_wire())),
                  (pack("k3"), pack(live.to_wire()))], None, (2, (1, "a.0")))
        inc.stage([(pack("k2"), None), (pack("k3"), None)], [])
        assert calls.stages == [(0, 0, True), (3, 0, False), (0, 2, False)]
        state.adopt(**inc.parts((2, [((1, "a.0"), 1)], 6)))
        state.commit()
        assert calls.writes == [(0, False, True)]
        assert versions(state) == {"k1": live.to_wire()}
    finally:
        state.close()
    assert reopened(tmp_path / "s.db") == {"k1": live.to_wire()}


def test_a_new_master_mid_stream_stages_its_snapshot_afresh(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with filled() as net:
        sent = record_sends(net.nodes["a"].replica)
        c, calls = join(net, path)
        new_master_midway(net, sent)
        assert net.masters() == ["b"] and net.contents("c") == net.contents("b") and not c.stale
        assert c.stats.snapshots_installed == 1
        assert [fresh for _, _, fresh in calls.stages].count(True) == 2  # a's, then b's from scratch
        mine = versions(c.state)
        net.close()
        assert reopened(path) == mine


def test_a_joiner_that_dies_mid_stream_reopens_without_the_staged_rows(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with filled() as net:
        sent = record_sends(net.nodes["a"].replica)
        c, calls = join(net, path)
        until_chunks(net, sent, 6)
        assert calls.stages and "staging" in tables(path)
        c.state.close()  # the process dies: nothing installed, the staged rows are in the file
        assert reopened(path) == {}
        assert "staging" not in tables(path)  # dropped at the open
        c2 = net.add("c", path).replica  # started again: it joins from scratch
        net.run(3.0)
        assert net.contents("c") == net.contents("a") and not c2.stale
        mine = versions(c2.state)
        net.close()
        assert reopened(path) == mine


def test_a_stale_staging_is_not_taken(tmp_path: Path) -> None:
    """Staging begun again makes the earlier token stale: its rows are refused, and an adopt naming it
    writes every row (the staged table is not what the state holds)."""
    state = open_state(tmp_path / "s.db")
    try:
        calls = FileCalls(state)
        first = state.begin_staging()
        second = state.begin_staging()
        assert first is not None and second is not None and first != second
        row = (b"\x61k", b"")
        assert not state.stage_rows(first, [row], [])
        v = Version("x", 5, "a.0", 1, False, None)
        assert state.stage_rows(second, [(b"\x61k", pack(v.to_wire()))], [])
        entries = VersionedState.parts_from_wire(
            {"seq": 1, "lineage": [[[1, "a.0"], 1]], "hlc": 5, "applied": [], "versions": [["k", v.to_wire()]]})
        state.adopt(**entries, staged=first)
        state.commit()
        assert calls.writes[-1] == (1, True, False)  # every row written, the staging left alone
        assert not state.stage_rows(second, [row], [])  # the adopt ended that staging too
    finally:
        state.close()
    assert reopened(tmp_path / "s.db") == {"k": v.to_wire()}


def test_a_state_without_a_file_stages_nothing() -> None:
    state = VersionedState()
    assert state.begin_staging() is None
    assert not state.stage_rows(1, [(b"k", b"v")], [])



def _row(key: str, value: Any, seq: int) -> tuple[bytes, bytes]:
    return pack(key), pack(Version(value, 5 + seq, "a.0", seq, False, None).to_wire())


HEADER = (2, [((1, "a.0"), 1)], 7)


class FailingStage(FileCalls):
    """A file whose next ``stage`` fails (a disk error) and stages nothing."""

    fail = False

    def stage(self, rows: Any, gone: list[Any], *, fresh: bool) -> None:
        if self.fail:
            self.fail = False
            raise BackendError("disk I/O error (injected)")
        super().stage(rows, gone, fresh=fresh)


def test_a_chunk_the_file_failed_to_stage_makes_the_install_write_every_row(tmp_path: Path) -> None:
    """The chunk is in the staged entries but not in the table: a caller that goes on after the
    BackendError must not get the table taken as the state (one key short)."""
    state = open_state(tmp_path / "s.db")
    try:
        file = FailingStage(state)
        inc = Incoming("a.0", (1, "a.0"), False, file=state)
        inc.take([_row("k1", 1, 1)], pack("k1"), (2, (1, "a.0")))
        inc.step()
        file.fail = True
        inc.take([_row("k2", 2, 2)], None, (2, (1, "a.0")))
        with pytest.raises(BackendError):
            inc.step()  # (a chunk is staged in a step after it is taken)
        inc.next_pass()
        inc.stage([], [])
        state.adopt(**inc.parts(HEADER))
        state.commit()
        assert file.writes == [(2, True, False)]
        mine = versions(state)
        assert set(mine) == {"k1", "k2"}
    finally:
        state.close()
    assert reopened(tmp_path / "s.db") == mine


def test_staging_begun_before_an_adopt_is_committed_does_not_empty_the_file(tmp_path: Path) -> None:
    """An adopt took the staged table, and another snapshot begins staging before the commit: the
    commit writes every row, and does not take the new, empty table as the state."""
    state = open_state(tmp_path / "s.db")
    try:
        file = FileCalls(state)
        inc = Incoming("a.0", (1, "a.0"), False, file=state)
        inc.take([_row("k1", 1, 1), _row("k2", 2, 2)], None, (2, (1, "a.0")))
        inc.next_pass()
        inc.stage([], [])
        state.adopt(**inc.parts(HEADER))
        Incoming("a.0", (1, "a.0"), False, file=state)  # begins staging afresh
        state.commit()
        assert file.writes == [(2, True, False)]
        mine = versions(state)
        assert set(mine) == {"k1", "k2"}
    finally:
        state.close()
    assert reopened(tmp_path / "s.db") == mine
