"""Store operations on a master, on both backends: semantics, type clashes, expiry, broadcasts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_mqtt import channel as ch
from broker_mqtt.store import Backend, MemoryBackend, NoSuchKey, SQLiteBackend, TypeClash
from broker_mqtt.store.commands import (
    Append,
    Clear,
    Decrement,
    Erase,
    Expire,
    Increment,
    InsertInto,
    Pop,
    Push,
    Put,
    PutUnique,
    RemoveFrom,
    decode_broadcast,
    decode_command,
)
from broker_mqtt.store.master import Master


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    b: Backend = MemoryBackend() if request.param == "memory" else SQLiteBackend(tmp_path / "m.db")
    yield b
    b.close()


@pytest.fixture
def master(backend: Backend) -> Master:
    return Master("s", "M", backend, 0.0)


def broadcasts(m: Master) -> list[Any]:
    out = []
    for env in m.to_send():
        if isinstance(env.message, ch.Event):
            out.append(decode_command(env.message.payload))
        elif isinstance(env.message, ch.EventBatch):  # a run of events goes as one message
            out.extend(decode_command(p) for p in env.message.payloads)
    return out


def test_put_get_erase_clear(master: Master) -> None:
    master.execute(Put("a", 1), 0.0)
    master.execute(Put("b", [1, 2]), 0.0)
    assert master.get("a") == 1 and master.exists("b") and sorted(master.keys()) == ["a", "b"]
    master.execute(Erase("a"), 0.0)
    master.execute(Erase("missing"), 0.0)  # not an error
    with pytest.raises(NoSuchKey):
        master.get("a")
    master.execute(Clear(), 0.0)
    assert master.keys() == []
    assert broadcasts(master) == [Put("a", 1), Put("b", [1, 2]), Erase("a"), Erase("missing"), Clear()]


def test_put_unique(master: Master) -> None:
    assert master.execute(PutUnique("k", 1, None, "M", 0), 0.0) is True
    assert master.execute(PutUnique("k", 2, None, "M", 0), 0.0) is False
    assert master.get("k") == 1
    assert broadcasts(master) == [Put("k", 1)]  # a failed put_unique broadcasts nothing


def test_increment_decrement(master: Master) -> None:
    master.execute(Increment("n", 5), 0.0)
    master.execute(Decrement("n", 2), 0.0)
    master.execute(Decrement("m", 1), 0.0)
    master.execute(Increment("f", 0.5), 0.0)
    master.execute(Increment("f", 0.25), 0.0)
    assert (master.get("n"), master.get("m"), master.get("f")) == (3, -1, 0.75)
    assert broadcasts(master)[:2] == [Put("n", 5), Put("n", 3)]  # canonical effect: the new value


@pytest.mark.parametrize("setup, cmd", [
    (Put("k", "text"), Increment("k", 1)),
    (Put("k", 1), Increment("k", 1.0)),
    (Put("k", True), Decrement("k", 1)),
    (Put("k", 1), Append("k", "x")),
    (Put("k", "abc"), Append("k", b"x")),
    (None, Append("k", 5)),
    (Put("k", [1]), InsertInto("k", 1)),
    (Put("k", {1}), InsertInto("k", 1, "value")),
    (Put("k", "s"), RemoveFrom("k", "s")),
    (Put("k", {"a": 1}), Push("k", 1)),
    (Put("k", 7), Pop("k")),
])
def test_type_clash_changes_nothing(master: Master, setup: Any, cmd: Any) -> None:
    if setup is not None:
        master.execute(setup, 0.0)
    before = master.snapshot()
    master.to_send()
    with pytest.raises(TypeClash):
        master.execute(cmd, 1.0)
    assert master.snapshot() == before and broadcasts(master) == []


def test_append(master: Master) -> None:
    master.execute(Append("s", "ab"), 0.0)
    master.execute(Append("s", "cd"), 0.0)
    master.execute(Append("b", b"\x00"), 0.0)
    master.execute(Append("b", b"\x01"), 0.0)
    assert master.get("s") == "abcd" and master.get("b") == b"\x00\x01"


def test_sets_and_tables(master: Master) -> None:
    master.execute(InsertInto("set", "x"), 0.0)
    master.execute(InsertInto("set", "y"), 0.0)
    master.execute(InsertInto("set", "x"), 0.0)
    master.execute(RemoveFrom("set", "y"), 0.0)
    master.execute(RemoveFrom("set", "absent"), 0.0)
    assert master.get("set") == {"x"}
    master.execute(InsertInto("tbl", "a", 1), 0.0)
    master.execute(InsertInto("tbl", "b", [2]), 0.0)
    master.execute(InsertInto("tbl", "a", None), 0.0)  # an existing table takes None values
    master.execute(RemoveFrom("tbl", "b"), 0.0)
    assert master.get("tbl") == {"a": None}
    with pytest.raises(NoSuchKey):
        master.execute(RemoveFrom("nothing", 1), 0.0)


def test_vectors(master: Master) -> None:
    master.execute(Push("v", 1), 0.0)
    master.execute(Push("v", {"two": 2}), 0.0)
    assert master.get("v") == [1, {"two": 2}]
    master.execute(Pop("v"), 0.0)
    master.execute(Pop("v"), 0.0)
    master.execute(Pop("v"), 0.0)  # popping an empty vector leaves it empty
    assert master.get("v") == []
    with pytest.raises(NoSuchKey):
        master.execute(Pop("nothing"), 0.0)


def test_expiry_enforced_by_master_tick(master: Master) -> None:
    master.execute(Put("k", 1, 10.0), 0.0)
    master.execute(Put("keep", 1), 0.0)
    assert master.next_deadline <= 1.0  # heartbeat first
    master.tick(5.0)
    assert master.exists("k")
    master.to_send()
    assert master.next_deadline <= 10.0
    master.tick(10.0)
    assert not master.exists("k") and master.exists("keep")
    assert broadcasts(master) == [Expire("k")]


def test_every_write_resets_expiry(master: Master) -> None:
    master.execute(Increment("n", 1, 10.0), 0.0)
    master.execute(Increment("n", 1, 10.0), 8.0)  # now expires at 18
    master.tick(12.0)
    assert master.get("n") == 2
    master.execute(Increment("n", 1), 13.0)  # no expiry: permanent
    master.tick(100.0)
    assert master.get("n") == 3


def test_expired_but_unswept_key_counts_as_absent(master: Master) -> None:
    master.execute(Put("k", 1, 1.0), 0.0)
    master.execute(Put("n", 5, 1.0), 0.0)
    assert master.execute(PutUnique("k", 2, None, "M", 0), 2.0) is True
    master.execute(Increment("n", 1), 2.0)
    assert master.get("n") == 1


def test_last_seq_follows_broadcasts(master: Master, backend: Backend) -> None:
    master.execute(Put("a", 1), 0.0)
    master.execute(Put("b", 1, 1.0), 0.0)
    master.tick(1.0)
    assert backend.last_seq == master.producer.last_seq == 3


@pytest.mark.parametrize("bad", [Expire("k"), "put", ["put", "k", 1, None]])
def test_execute_rejects_non_writes(master: Master, bad: Any) -> None:
    with pytest.raises(TypeError):
        master.execute(bad, 0.0)


def test_remote_writes_are_broadcast_with_the_writing_node(master: Master) -> None:
    writer = ch.Producer("c1/w0", 0.0)
    writer.add_consumer(master.id, 0.0, greeting="c1")  # the greeting names the writing node
    writer.produce(Put("a", 1).to_wire(), 0.0)
    writer.produce(Erase("a").to_wire(), 0.0)
    writer.produce(Clear().to_wire(), 0.0)
    master.execute(Put("b", 2), 0.0)
    for out in writer.to_send(batch=8):
        master.handle(out.message, 0.0)
    payloads = []
    for env in master.to_send():
        if isinstance(env.message, ch.EventBatch):
            payloads.extend(env.message.payloads)
        elif isinstance(env.message, ch.Event):
            payloads.append(env.message.payload)
    assert [decode_broadcast(p) for p in payloads] == [Put("b", 2), Put("a", 1, None, "c1"), Erase("a", "c1"),
                                                        Clear("c1")]
