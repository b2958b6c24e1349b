"""Wire form of store commands, control messages, errors and snapshots."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest

import broker_mqtt.store as store
from broker_mqtt.store import (
    Entry,
    NoSuchKey,
    StoreDecodeError,
    StoreError,
    Timeout,
    TypeClash,
    WriteBufferFull,
)
from broker_mqtt.store.commands import (
    Append,
    AttachClone,
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
    PutUniqueResult,
    RemoveFrom,
    RequestFailed,
    decode_broadcast,
    decode_command,
    decode_control,
    snapshot_from_wire,
    snapshot_to_wire,
)
from broker_mqtt.store.errors import error_from_wire

COMMANDS = [
    Put("k", {"a": [1, 2]}, 3.5), Put(["k", 1], b"v"), PutUnique("k", 1, None, "c1", 7), Erase("k"), Clear(),
    Increment("n", 2), Decrement("n", 1.5, 10), Append("s", "tail"), InsertInto("set", "x"),
    InsertInto("tbl", "x", [1], 2.0), RemoveFrom("set", "x"), Push("vec", {"e": 1}), Pop("vec", 1),
    Expire("k"),
]
CONTROL = [AttachClone("c1", 3)]
BROADCAST = [Put("k", 1, None), Erase("k"), Clear(), Expire("k"), PutUniqueResult("c1", 7, True),
             Put("k", [1], 2.0, "node.1"), Erase("k", "node.1"), Clear("node.1")]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.KIND.value)
def test_command_round_trip_and_truncation(cmd: Any) -> None:
    wire = cbor2.loads(cbor2.dumps(cmd.to_wire()))
    assert decode_command(wire) == cmd
    assert type(cmd).from_wire(wire) == cmd
    for n in range(len(wire)):
        with pytest.raises(StoreDecodeError):
            decode_command(wire[:n])
    with pytest.raises(StoreDecodeError):
        decode_command([*wire, None])


@pytest.mark.parametrize("msg", CONTROL, ids=lambda c: c.KIND.value)
def test_control_round_trip(msg: Any) -> None:
    wire = cbor2.loads(cbor2.dumps(msg.to_wire()))
    assert decode_control(wire) == msg
    with pytest.raises(StoreDecodeError):
        decode_command(wire)  # a control message is no command


@pytest.mark.parametrize("msg", BROADCAST, ids=lambda c: c.KIND.value)
def test_broadcast_round_trip(msg: Any) -> None:
    assert decode_broadcast(cbor2.loads(cbor2.dumps(msg.to_wire()))) == msg


@pytest.mark.parametrize("msg", [Increment("n", 1), PutUnique("k", 1, None, "c", 1), AttachClone("c", 1)])
def test_broadcast_rejects_writes_and_control(msg: Any) -> None:
    with pytest.raises(StoreDecodeError):
        decode_broadcast(msg.to_wire())


def test_publisher_only_in_broadcasts() -> None:
    for msg in (Put("k", 1, None, "n"), Erase("k", "n"), Clear("n")):
        wire = msg.to_wire()
        assert wire[-1] == "n" and len(wire) == len(type(msg)(*[*vars_of(msg)][:-1]).to_wire()) + 1
        assert decode_broadcast(wire) == msg and type(msg).from_wire(wire) == msg
        with pytest.raises(StoreDecodeError):
            decode_command(wire)  # a writer may not claim a publisher
        for bad in ("", 5, None, b"n"):
            with pytest.raises(StoreDecodeError):
                decode_broadcast([*wire[:-1], bad])
    assert Put("k", 1).to_wire() == ["put", "k", 1, None]  # no publisher: the form writers send


def vars_of(msg: Any) -> list[Any]:
    return [getattr(msg, name) for name in msg.__dataclass_fields__]


def test_request_failed_carries_error_class() -> None:
    wire = cbor2.loads(cbor2.dumps(RequestFailed("c", 1, TypeClash("bad")).to_wire()))
    msg = decode_broadcast(wire)
    assert isinstance(msg, RequestFailed) and isinstance(msg.error, TypeClash) and str(msg.error) == "bad"


@pytest.mark.parametrize("err", [NoSuchKey("k"), TypeClash("t"), Timeout("x"), WriteBufferFull("w")])
def test_error_round_trip(err: StoreError) -> None:
    back = error_from_wire(err.to_wire())
    assert type(back) is type(err) and str(back) == str(err)


def test_error_from_garbage() -> None:
    assert isinstance(error_from_wire(["nope", "x"]), store.StoreProtocolError)
    assert isinstance(error_from_wire(5), store.StoreProtocolError)


@pytest.mark.parametrize("wire", [
    None, [], ["bogus"], [3], ["put", "k", 1, -1.0], ["put", "k", 1, "soon"], ["increment", "n", "1", None],
    ["increment", "n", True, None], ["put_unique", "k", 1, None, 5, 1], ["put_unique", "k", 1, None, "c", -1],
    ["clear", 1], ["put_unique_result", "c", 1, True],
])
def test_malformed_commands(wire: Any) -> None:
    with pytest.raises(StoreDecodeError):
        decode_command(wire)


def test_malformed_control() -> None:
    with pytest.raises(StoreDecodeError):
        decode_control(["attach_clone", "c", -1])
    with pytest.raises(StoreDecodeError):
        decode_control(["put", "k", 1, None])


def test_snapshot_wire() -> None:
    entries = [Entry("a", 1, 9.0), Entry(["b"], {2})]
    assert snapshot_from_wire(snapshot_to_wire(entries)) == [Entry("a", 1), Entry(["b"], {2})]
    for bad in (None, [["a"]], [1]):
        with pytest.raises(StoreDecodeError):
            snapshot_from_wire(bad)


def test_no_io_in_protocol_code() -> None:
    import inspect

    from broker_mqtt.store import clone, commands, master
    for module in (clone, commands, master):
        source = inspect.getsource(module)
        for banned in ("import anyio", "import trio", "import socket", "import time", "import asyncio"):
            assert banned not in source, (module.__name__, banned)
