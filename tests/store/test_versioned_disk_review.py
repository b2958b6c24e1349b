"""Review of ``DiskState`` (resident="disk"): cases the differential test does not reach."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_mqtt.store import snapshot_stream
from broker_mqtt.store.errors import BackendError
from broker_mqtt.store.snapshot_stream import SnapshotReader
from broker_mqtt.store.versioned import Record, VersionedState
from broker_mqtt.store.versioned_disk import open_disk_state
from broker_mqtt.store.versioned_sqlite import open_state

EPOCH = (1, "n")


def _put(state: VersionedState, key: object, value: object) -> None:
    seq = state.last_seq + 1
    state.apply(Record(seq, EPOCH, 100 + seq, "o", "w", seq, ("put", key, value, None), None))


def test_a_first_pass_chunk_looks_at_no_more_than_scan_limit_rows(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk of the first pass (since 0) skips the rows written after its pass's bound: when the keys
    behind the cursor were all rewritten since the pass began (a bulk update, a queue's ids), one chunk
    read every remaining row of the file in one step (0.15 s per 300,000 rows: seconds of stalled event
    loop at the 10,000,000 keys the form is for). A pass of changes stops at SCAN_LIMIT; so must this."""
    monkeypatch.setattr(snapshot_stream, "SCAN_LIMIT", 100)
    monkeypatch.setattr(snapshot_stream, "ROWS_PER_QUERY", 10)
    source = open_disk_state(tmp_path / "s.db")
    try:
        for i in range(1000):
            _put(source, i, "x")
        reader = SnapshotReader(source)
        entries, nxt, _ = reader.chunk(None, 0, 200)
        assert entries and nxt is not None
        for i in range(1000):
            _put(source, i, "y")  # every row now lies past the pass's bound
        looked = 0
        rows_after = source.rows_after

        def counted(*args: object) -> list[tuple[bytes, bytes | None]]:
            nonlocal looked
            rows = rows_after(*args)  # type: ignore[arg-type]
            looked += len(rows)
            return rows

        source.rows_after = counted  # type: ignore[method-assign]
        reader.chunk(nxt, 0, 200)
        assert looked <= 100 + 10
    finally:
        source.close()


def test_a_tombstone_whose_hlc_is_past_a_sqlite_integer_is_held_as_in_memory(tmp_path: Path) -> None:
    """A record's hlc is any int on the wire; the memory form holds a tombstone of hlc 2**63 (and its
    file), the disk form raised a raw OverflowError from apply (no BackendError: not even the replica's
    stop) and could not open that memory form's file."""
    big = 1 << 63
    mem = open_state(tmp_path / "m.db")
    mem.apply(Record(1, EPOCH, big, "o", "w", 1, ("erase", "k"), None))
    mem.commit()
    mem.close()
    opened = open_disk_state(tmp_path / "m.db")
    try:
        assert opened.version("k") is not None and opened.tombstones == 1
        assert opened.old_tombstones(10**6, 10) == []
    finally:
        opened.close()
    disk = open_disk_state(tmp_path / "d.db")
    try:
        disk.apply(Record(1, EPOCH, big, "o", "w", 1, ("erase", "k"), None))
        disk.apply(Record(2, EPOCH, big + 1, "o", "w", 2, ("clear",), None))
        disk.commit()
        assert disk.version("k").hlc == big and disk.tombstones == 1  # type: ignore[union-attr]
    except OverflowError:
        pytest.fail("OverflowError, not held")
    except BackendError:
        pytest.fail("BackendError for what the memory form holds")
    finally:
        disk.close()


def test_a_snapshot_entry_whose_hlc_or_expiry_is_past_64_bits_is_staged(tmp_path: Path) -> None:
    """The joiner takes a staged row's columns from the entry's wire form (``version_columns``): they
    are clamped as the state's own writes are."""
    from broker_mqtt.store.history import Version
    from broker_mqtt.store.packing import pack
    from broker_mqtt.store.snapshot_stream import Incoming

    joiner = open_disk_state(tmp_path / "j.db")
    try:
        inc = Incoming("src", EPOCH, False, file=joiner)
        inc.take([(pack("a"), pack(Version(None, 1 << 64, "o", 1, True).to_wire())),
                  (pack("b"), pack(Version(2, 5, "o", 1, False, 1 << 70).to_wire()))], None, (1, EPOCH))
        inc.step()
        joiner.adopt(**inc.parts((1, [(EPOCH, 1)], 5)), report=False)
        assert joiner.version("a") == Version(None, 1 << 64, "o", 1, True)
        assert joiner.version("b") == Version(2, 5, "o", 1, False, 1 << 70)
        assert (len(joiner), joiner.tombstones) == (1, 1) and joiner.next_expiry() == (float(1 << 70), "b")
    finally:
        joiner.close()
