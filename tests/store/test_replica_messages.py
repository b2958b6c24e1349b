"""The elected-store replication messages: one encode, one decode, one error for anything malformed."""

from __future__ import annotations

from typing import Any

import pytest

from broker_mqtt.store.commands import Put
from broker_mqtt.store.errors import StoreDecodeError
from broker_mqtt.store.history import Conflict, Record, Version
from broker_mqtt.store.replica_events import Role
from broker_mqtt.store.replica_messages import (
    Ack,
    Active,
    Claim,
    Fetch,
    Heartbeat,
    Log,
    Promise,
    Resign,
    Snap,
    SnapChunk,
    SnapFetch,
    Tail,
    Write,
    WriteAck,
    Writes,
    decode,
    encode,
    group_writes,
    sender_of,
    split,
)
from broker_mqtt.store.routes import replication_topic, routes
from broker_mqtt.store.versioned import VersionedState
from broker_mqtt.wire import codec

E1, E2 = (1, "a.0"), (2, "b.0")
REC = Record(3, E2, 1000, "b", "w", 7, ("put", "k", [1, 2], None), None)
MANY = Record(4, E2, 1001, "b", "$expiry", 0, ("many", [("erase", "k"), ("forget", "j")]))
CONFLICT = Conflict("k", Version("x", 5, "b", 2), Version(None, 4, "a", 2, True, 9.5))

MESSAGES: list[Any] = [
    Heartbeat("a.0", E1, Role.MASTER, (3, E1), "a.0"),
    Heartbeat("c.0", None, Role.FOLLOWER, (0, None), None),
    Claim(E2, (3, E1)),
    Promise(E2, "c.0", (3, E1), [(E1, 1)], 3),
    Fetch(E2, "c.0", "b.0", (3, E1)),
    Fetch(E2, "c.0", "b.0", None),
    Tail(E2, "c.0", [REC, MANY], 4, "b.0"),
    Snap(E2, "c.0", VersionedState().to_wire(), "b.0"),
    SnapFetch(E2, "c.0", "b.0", None, None, 4),
    SnapFetch(E2, "c.0", "b.0", b"\x61k", (3, E1), 4),
    SnapChunk(E2, "c.0", "b.0", None, None, (3, E1), [(b"\x61k", b"\x80"), (b"\x61l", None)], b"\x61l"),
    SnapChunk(E2, "c.0", "b.0", None, (3, E1), None, [], None),
    SnapChunk(E2, "c.0", "b.0", None, (3, E1), (4, E2), [], None, True, [["w", 1, 2, [[1, True]]]],
              (4, [(E1, 1), (E2, 4)], 99)),
    Active(E2, (4, E2), [(E1, 1), (E2, 3)], [CONFLICT], [([(E1, 1)], 2)]),
    Active(E2, (4, E2), [(E1, 1), (E2, 3)], [CONFLICT], [([(E1, 1)], 2)], (3, E2)),
    Log(E2, [REC]),
    Ack(E2, "c.0", 4),
    Write("w", 7, "b", Put("k", 1).to_wire(), E2),
    Write("w", 8, "b", Put("k", 2).to_wire(), None),
    Writes("w", "b", [(7, Put("k", 1).to_wire()), (8, Put("k", 2).to_wire())], E2),
    Writes("w", "b", [(9, Put("k", 3).to_wire())], None),
    WriteAck(E2, "w", 8, {7: None, 8: ["error", "type_clash", "no"]}),
    WriteAck(E2, "w", 8, {}, "0123456789abcdef0123456789abcdef"),
    Resign(E2, (4, E2)),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip_through_cbor(msg: Any) -> None:
    wire = encode(msg)
    assert decode(codec.decode(codec.encode(wire))) == msg
    assert encode(decode(wire)) == wire


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_truncation_is_a_decode_error(msg: Any) -> None:
    wire = encode(msg)
    # a wack's origin is optional, and so is an active's subsumed_at (masters from before them)
    shortest = 5 if isinstance(msg, WriteAck) else 6 if isinstance(msg, Active) else len(wire)
    for n in range(shortest):
        with pytest.raises(StoreDecodeError):
            decode(wire[:n])


@pytest.mark.parametrize("bad", [None, 3, "hb", [], [1], ["nope"], ["hb", "n", [1], "master", [0, None], None],
                                 ["hb", "n", None, "boss", [0, None], None], ["log", [1, "m"], [["x"]]],
                                 ["ack", [1, "m"], "n", "x"], ["write", "w", 1, 2, [], None],
                                 ["writes", "w", "b", [["x", []]], None], ["writes", "w", "b", 3, None],
                                 ["wack", [1, "m"], "w", 1, [[1]]], ["claim", [1, "m"], "pos"]])
def test_malformed_input_is_one_decode_error(bad: Any) -> None:
    with pytest.raises(StoreDecodeError):
        decode(bad)


def test_the_wire_form_is_the_documented_list() -> None:
    assert encode(Heartbeat("a.0", E1, Role.MASTER, (3, E1), "a.0")) == ["hb", "a.0", [1, "a.0"], "master",
                                                                         [3, [1, "a.0"]], "a.0"]
    assert encode(Write("w", 7, "b", ["put", "k", 1, None], None)) == ["write", "w", 7, "b", ["put", "k", 1, None],
                                                                      None]
    assert encode(WriteAck(E2, "w", 8, {8: True})) == ["wack", [2, "b.0"], "w", 8, [[8, True]]]


def test_a_tail_is_read_only_by_its_addressee() -> None:
    wire = encode(Tail(E2, "c.0", [REC, MANY], 4, "b.0"))
    assert decode(wire, me="c.0") == Tail(E2, "c.0", [REC, MANY], 4, "b.0")
    assert decode(wire, me="d.0") == Tail(E2, "c.0", [], 4, "b.0")  # another node's records: not decoded
    wire[3] = [["not", "a", "record"]]
    with pytest.raises(StoreDecodeError):
        decode(wire, me="c.0")
    assert decode(wire, me="d.0").records == []


def test_writes_placed_together_travel_as_one_message_per_writer_and_epoch() -> None:
    w = [Write("w", n, "b", ["put", "k", n, None], E2) for n in range(1, 301)]
    other = Write("v", 1, "c", ["put", "j", 1, None], E2)
    grouped = group_writes([*w, other, Write("w", 301, "b", ["put", "k", 301, None], E1)])
    assert [type(g).__name__ for g in grouped] == ["Writes", "Writes", "Write", "Write"]
    assert grouped[0] == Writes("w", "b", [(n, ["put", "k", n, None]) for n in range(1, 257)], E2)  # 256 at most
    assert [n for n, _ in grouped[1].writes] == list(range(257, 301))  # type: ignore[union-attr]
    assert grouped[2] == other and sender_of(grouped[0]) == "b"
    assert encode(grouped[1])[0] == "writes" and encode(grouped[2])[0] == "write"  # alone: the old form


def test_a_batch_too_large_for_one_message_splits_into_halves_that_mean_the_same() -> None:
    recs = [Record(i, E2, 1000 + i, "b", "w", i, ("put", "k", i, None), None) for i in range(1, 6)]
    halves = split(encode(Log(E2, recs)))
    assert halves is not None and [decode(h) for h in halves] == [Log(E2, recs[:2]), Log(E2, recs[2:])]
    writes = Writes("w", "b", [(1, ["put", "k", 1, None]), (2, ["put", "k", 2, None])], E2)
    assert [decode(h) for h in split(encode(writes)) or []] == [Writes("w", "b", [x], E2) for x in writes.writes]
    tail = split(encode(Tail(E2, "c.0", recs[:2], 9, "b.0")))
    assert tail is not None and [decode(h) for h in tail] == [Tail(E2, "c.0", [r], 9, "b.0") for r in recs[:2]]
    assert split(encode(Log(E2, recs[:1]))) is None and split(encode(Ack(E2, "c.0", 4))) is None


def test_an_answer_too_large_for_one_message_splits_into_answers_that_mean_the_same() -> None:
    # writes 1..10 answered; 3, 5, 9 and 10 with results: the first half answers 1..8, the second 9..10
    wack = WriteAck(E2, "w", 10, {3: True, 5: ["error", "x"], 9: False, 10: [[1, b"m", 1]]}, "b")
    halves = split(encode(wack))
    assert halves is not None
    assert [decode(h) for h in halves] == [WriteAck(E2, "w", 8, {3: True, 5: ["error", "x"]}, "b"),
                                           WriteAck(E2, "w", 10, {9: False, 10: [[1, b"m", 1]]}, "b")]
    replica_answer = WriteAck(E2, "w", 10, {9: False, 3: True}, None)  # any order; no origin: the log topic
    halves = split(encode(replica_answer))
    assert halves is not None and [decode(h) for h in halves] == [WriteAck(E2, "w", 8, {3: True}, None),
                                                                  WriteAck(E2, "w", 10, {9: False}, None)]
    assert split(encode(WriteAck(E2, "w", 10, {3: True}, None))) is None  # one answer: no halves
    # with a lower bound (answers after 2): the second half answers after the first half's upto
    for origin in ("b", None):
        halves = split(encode(WriteAck(E2, "w", 10, {3: True, 9: False}, origin, 2)))
        assert halves is not None and [decode(h) for h in halves] == [WriteAck(E2, "w", 8, {3: True}, origin, 2),
                                                                      WriteAck(E2, "w", 10, {9: False}, origin, 8)]


def test_a_wack_with_a_lower_bound_reads_as_before_to_a_decoder_from_before_it() -> None:
    """``after`` follows the origin; a replica's writer has none, so its place holds "" (a decoder
    from before ``after`` reads the origin with _str, which takes no None), and the answer still
    travels on the log topic."""
    replica_answer = encode(WriteAck(E2, "b.0", 10, {9: False}, None, 4))
    assert replica_answer == ["wack", [2, "b.0"], "b.0", 10, [[9, False]], "", 4]
    assert decode(replica_answer) == WriteAck(E2, "b.0", 10, {9: False}, None, 4)
    assert routes("s", replica_answer) == [(replication_topic("s"), None)]
    epoch, writer, upto, results = replica_answer[1:5]  # as _decode_wack read it before
    assert isinstance(replica_answer[5], str) and (writer, upto, results) == ("b.0", 10, [[9, False]])
    old = encode(WriteAck(E2, "w", 10, {9: False}, "b"))  # from a master from before: no bound
    assert old == ["wack", [2, "b.0"], "w", 10, [[9, False]], "b"] and decode(old).after is None
    with pytest.raises(StoreDecodeError):
        decode(["wack", [2, "b.0"], "w", 10, [], "", "4"])


def test_an_actives_held_position_without_an_epoch_is_taken_as_none() -> None:
    """``subsumed_at`` names a history; a position with no epoch is held by every short history
    (``contains``), so a hostile or broken one would make claimants leave replicas out: dropped."""
    wire = encode(Active((2, "m"), (5, (2, "m")), [((2, "m"), 1)], [], [([((1, "a"), 1)], 3)], (5, (2, "m"))))
    assert decode(wire).subsumed_at == (5, (2, "m"))
    wire[6] = [7, None]
    assert decode(wire).subsumed_at is None
