"""Second review of ``DiskState`` (resident="disk"): commits after b417860."""

from __future__ import annotations

from pathlib import Path

import pytest
from _elected_sim import FailingFile, SimNet, elect

from broker_mqtt.store.commands import Increment, Put
from broker_mqtt.store.errors import BackendError
from broker_mqtt.store.history import Version
from broker_mqtt.store.packing import pack
from broker_mqtt.store.snapshot_stream import Incoming
from broker_mqtt.store.versioned_disk import open_disk_state

EPOCH = (1, "n")


def test_a_read_that_failed_once_does_not_stop_the_master_at_its_next_refused_write() -> None:
    """``VersionedState.failed`` is latched by any failed read of the file, also one an application's
    local read (``store.get``: raised to the application, the replica goes on) or the queue's log
    reader (``LogReader._next_local``: swallowed) made. The master goes on then, but its next
    write that is refused for its own reason (a TypeClash, NoSuchKey, a queue command's error)
    found ``failed`` set and re-raised that old error: the master stopped, its writer never answered."""
    with SimNet(["a", "b"], seed=4, resident="disk") as net:
        a = elect(net, "a")
        assert a.state.on_disk
        net.write("a", Put("k", "text", None))
        net.run(0.5)

        conn = a.state._conn
        a.state._conn = FailingFile  # type: ignore[attr-defined]  # (one read of the file fails)
        with pytest.raises(BackendError):
            a.state.get("k")  # an application's local read: raised to it, the replica goes on
        a.state._conn = conn  # type: ignore[attr-defined]  # (the file reads again)
        assert a.state.get("k") == "text"
        net.write("a", Increment("k", 1, None))  # refused: a TypeClash, answered as such
        net.run(0.5)
        assert net.masters() == ["a"]


def test_a_staged_version_of_seq_past_int64_is_held_as_the_memory_form_holds_it(tmp_path: Path) -> None:
    """A version's seq is checked to 0..2**64-1 (``Version.from_wire``; the memory form holds any such),
    but SQLite's ``seq`` column binds 64-bit signed ints only: a snapshot chunk carrying a version of
    seq >= 2**63 (a peer's, or a memory-form source that holds one) raised a raw OverflowError out of
    ``Incoming.stage`` (not StoreDecodeError: out of ``Replica.handle``, past the store's loops), with
    the staged counts already moved and the staging's transaction left open. As 4c10933 did for the
    dead and expiry columns, the column is clamped (the packed version keeps the seq)."""
    wire = ["v", 5, "o", 1 << 63, False, None]
    memory = Incoming("src", EPOCH, False)
    memory.stage([(pack("k"), pack(wire))], [])  # the memory form takes it
    joiner = open_disk_state(tmp_path / "j.db")
    try:
        inc = Incoming("src", EPOCH, False, file=joiner)
        inc.stage([(pack("k"), pack(wire)), (pack("t"), pack([None, 1 << 70, "o", (1 << 64) - 1, True, None]))], [])
        joiner.adopt(**inc.parts((3, [(EPOCH, 1)], 0)))
        joiner.commit()
        assert (len(joiner), joiner.tombstones) == (1, 1)
        assert joiner.packed_version(pack("k")) == Version.from_wire(wire)  # the seq kept in the version
    finally:
        joiner.close()
