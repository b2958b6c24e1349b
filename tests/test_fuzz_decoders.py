"""Every decoder of network input returns a value or its documented decode error, on any input.

Hypothesis over the targets of ``fuzz_targets.py`` (``bench/fuzz.py`` runs the same targets for a
million inputs): raw bytes, byte mutations of valid encodings, structured mutations of valid wire values
(hostile leaves drawn by Hypothesis from the whole data model), and the regressions the fuzzing found,
each named by its input.
"""

from __future__ import annotations

import math
import random
import uuid
from typing import Any

import cbor2
import pytest
from fuzz_targets import LAYOUT, ME, PEER, TARGETS, Target, generate, mutate_bytes, mutate_value
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncactor.messages as actor_messages
from broker_mqtt import channel as ch
from broker_mqtt.endpoint.presence import PeerTable
from broker_mqtt.errors import DecodeError, peer_repr
from broker_mqtt.queue import commands as qc
from broker_mqtt.queue.model import MessageRecord, record_state
from broker_mqtt.spark.document import to_json
from broker_mqtt.store import commands as sc
from broker_mqtt.store import replica_messages as rm
from broker_mqtt.store.discovery import decode_store_message
from broker_mqtt.store.errors import StoreDecodeError
from broker_mqtt.store.log_ops import compute_op
from broker_mqtt.store.versioned import VersionedState
from broker_mqtt.wire import codec
from broker_mqtt.wire.identity import default_client_id
from broker_mqtt.wire.message import Kind, NodeEncoder, decode_batch

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = [t.name for t in TARGETS]
HUGE = 10**5000


def _id(value: Any) -> str:
    return peer_repr(value, 40)

# hostile leaves: any data-model value, nested a little
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63, max_value=2**80),
                     st.floats(), st.text(max_size=8), st.binary(max_size=8),
                     st.integers(4300, 4400).map(lambda e: -(10**e) if e % 2 else 10**e),  # (no repr of these)
                     st.sampled_from(["hb", "put", "ping", "events", "many", "queue_settle",
                                                      "queue_settle_acquire"]))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=4), st.integers()), inner, max_size=3)),
    max_leaves=8)


def _target(name: str) -> Target:
    return next(t for t in TARGETS if t.name == name)


@pytest.mark.parametrize("name", NAMES)
def test_valid_messages_are_accepted(name: str) -> None:
    target = _target(name)
    for data in target.encodings():
        assert target.outcome(data), data.hex()


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes(name: str, data: bytes) -> None:
    _target(name).outcome(data)  # a documented rejection or a value; anything else fails the test


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(seed=st.integers(0, 2**32))
def test_byte_mutations_of_valid_encodings(name: str, seed: int) -> None:
    target = _target(name)
    rng = random.Random(seed)
    encodings = target.encodings()
    target.outcome(mutate_bytes(rng.choice(encodings), rng, rng.choice(encodings)))


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(seed=st.integers(0, 2**32), leaf=_values, where=st.integers(0, 10**6))
def test_structured_mutations(name: str, seed: int, leaf: Any, where: int) -> None:
    """A valid wire value with a field replaced by a Hypothesis value, and mutated further."""
    target = _target(name)
    rng = random.Random(seed)
    value = mutate_value(target.seeds[where % len(target.seeds)], rng)
    if isinstance(value, list) and value:
        value[where % len(value)] = leaf
    elif isinstance(value, dict) and value:
        value[list(value)[where % len(value)]] = leaf
    target.outcome(target.wrap(value))


@pytest.mark.parametrize("name", NAMES)
def test_generated_inputs(name: str) -> None:
    """The bench's generator, a few hundred inputs per target (seeded: the same every run)."""
    target = _target(name)
    rng, encodings = random.Random(7), target.encodings()
    for _ in range(300):
        target.outcome(generate(target, rng, encodings))


@FUZZ
@given(good=st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=4), tail=st.binary(min_size=1, max_size=40))
def test_decode_batch_keeps_the_good_prefix(good: list[int], tail: bytes) -> None:
    enc = NodeEncoder(PEER.bytes)
    wires = [enc.encode(k, f"/t/{i}", codec.encode(i)) for i, k in enumerate(good)]
    messages, error = decode_batch(b"".join(wires) + tail)
    assert [(m.topic, m.payload) for m in messages[:len(good)]] == [(f"/t/{i}", codec.encode(i)) for i in
                                                                     range(len(good))]
    assert error is None or isinstance(error, DecodeError)


# -- regressions: each input the fuzzing found, and what must happen to it ------------------------------------

def test_peer_repr_never_raises() -> None:
    assert peer_repr(HUGE).startswith("<int")
    assert peer_repr([1, HUGE]).startswith("<list")
    assert peer_repr("x" * 500).endswith("...") and len(peer_repr("x" * 500)) == 80


@pytest.mark.parametrize("wire", [[HUGE, 0, PEER.bytes, None, 16, "/t", b""], [1, -HUGE, PEER.bytes, None, 16, "/t", b""],
                                  [1, 0, PEER.bytes, None, -HUGE, "/t", b""]], ids=_id)
def test_node_message_with_a_huge_int_field(wire: list[Any]) -> None:
    """A version, kind or ttl past Python's 4300-digit repr limit: DecodeError (was ValueError)."""
    messages, error = decode_batch(cbor2.dumps(wire))
    assert messages == [] and isinstance(error, DecodeError)


@pytest.mark.parametrize("wire", [[HUGE], ["event", "p", -HUGE, 1], ["cumulative_ack", "c", HUGE, 1],
                                  ["nack", "c", "p", [[HUGE, 2]]], ["retransmit_failed", "p", "c", HUGE + 1, HUGE],
                                  ["handshake", "p", "c", 1, -HUGE, None], ["handshake", "p", "c", 1, HUGE, None],
                                  ["handshake", "p", "c", 1, math.inf, None], ["nack", "c", "p", [[HUGE + 1, HUGE]]]], ids=_id)
def test_channel_message_with_a_huge_int(wire: list[Any]) -> None:
    with pytest.raises(ch.ChannelDecodeError):
        ch.decode_message(wire)


@pytest.mark.parametrize("wire", [[[1], "x"], [{"a": 1}], [{1, 2}]], ids=_id)
def test_store_message_with_an_unhashable_head(wire: list[Any]) -> None:
    """``[[1], "x"]`` made decode_store_message raise TypeError (unhashable) instead of StoreDecodeError."""
    with pytest.raises(StoreDecodeError):
        decode_store_message(wire)


@pytest.mark.parametrize("wire", [["put", "k", 1, HUGE], ["put", "k", 1, math.inf], ["put", "k", 1, math.nan],
                                  ["increment", "k", 1, HUGE], ["put", "k", 1, None, HUGE], ["put_unique", "k", 1, None,
                                  "w", -HUGE], [HUGE], ["queue_acquire", "o", 1, HUGE], ["queue_renew", "o", math.inf],
                                  ["queue_forget", HUGE], ["queue_settle", "o", [[HUGE, "accept", None]]],
                                  ["queue_settle", "o", [[1, "accept", None, HUGE]]],
                                  ["queue_settle_acquire", "o", [[1, "accept", None]], 5, math.inf],
                                  ["queue_settle_acquire", "o", [[HUGE, "accept", None]], 5, 1.0]], ids=_id)
def test_store_command_with_a_huge_or_infinite_number(wire: list[Any]) -> None:
    """Expiries and durations past any clock (``wall + expiry`` overflowed at the master) and ids past
    2**63 (their text overflowed an answer) are malformed."""
    with pytest.raises(StoreDecodeError):
        sc.decode_command(wire)


@pytest.mark.parametrize("wire", [["insert_into", "t", [1, [2]], 3, None], ["remove_from", "t", [1, 2], None]], ids=_id)
def test_table_index_sent_as_an_array_is_hashable(wire: list[Any]) -> None:
    """An array index arrives as a list: ``insert_into`` raised TypeError (unhashable) at the master."""
    cmd = sc.decode_command(wire)
    assert isinstance(cmd, sc.InsertInto | sc.RemoveFrom)
    hash(cmd.index)
    if isinstance(cmd, sc.InsertInto):
        op, _ = compute_op(VersionedState(), cmd, 1.0)
        assert op == ("put", "t", {(1, (2,)): 3}, None)


def test_table_index_that_is_a_table_is_malformed() -> None:
    with pytest.raises(StoreDecodeError):
        sc.decode_command(["insert_into", "t", {"a": 1}, 3, None])


def test_no_such_key_of_a_huge_int_key() -> None:
    cmd = sc.decode_command(["remove_from", HUGE, 1, None])
    with pytest.raises(sc.StoreError):
        compute_op(VersionedState(), cmd, 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("wire", [["ack", [1, "a"], "n", math.inf], ["promise", [1, "a"], "n", [1, None], [], math.inf],
                                  ["wack", [1, "a"], "w", 1, [[math.inf, 1]]], ["hb", HUGE, None, "master", [0, None], None],
                                  ["claim", [HUGE, "a"], "x"], [HUGE]], ids=_id)
def test_replication_message_with_an_infinite_or_huge_number(wire: list[Any]) -> None:
    """``int(inf)`` raised OverflowError out of decode; a huge int in an error message, ValueError."""
    with pytest.raises(StoreDecodeError):
        rm.decode(wire)


def test_snapshot_with_an_infinite_answer_number() -> None:
    wire = VersionedState().to_wire()
    wire["applied"] = [["w", 1, 1, [[math.inf, None]]]]
    with pytest.raises(StoreDecodeError):
        VersionedState.parts_from_wire(wire)


@pytest.mark.parametrize("count", [math.inf, -math.inf], ids=_id)
def test_queue_record_with_an_infinite_count_is_no_record(count: float) -> None:
    wire = {"data": 1, "state": "ready", "owner": None, "count": count, "max": None, "reason": None}
    assert MessageRecord.from_wire(wire) is None and record_state(wire) is None


@pytest.mark.parametrize("body", [{"op": "hello", "name": "n", "topics": 1.5}, {"op": "hello", "name": HUGE},
                                  {"op": "hello", "topics": [HUGE]}, {"op": "hello", "topics": "/a"}], ids=_id)
def test_presence_with_bad_fields_is_malformed(body: dict[str, Any]) -> None:
    """``topics: 1.5`` raised TypeError out of PeerTable.receive, a huge-int name ValueError."""
    payload = NodeEncoder(PEER.bytes).encode(Kind.CONTROL, "presence", codec.encode(body))
    update = PeerTable(LAYOUT, ME).receive(LAYOUT.presence(default_client_id(PEER)), payload)
    assert update.malformed and not update.changed


def test_presence_that_is_well_formed_adds_the_peer() -> None:
    payload = NodeEncoder(PEER.bytes).encode(Kind.CONTROL, "presence", codec.encode({"op": "hello", "name": "n",
                                                                                      "topics": ["/a"]}))
    table = PeerTable(LAYOUT, ME)
    update = table.receive(LAYOUT.presence(default_client_id(PEER)), payload)
    assert not update.malformed and PEER in table and table.peers()[0].topics == ("/a",)
    assert uuid.UUID(PEER.hex) == PEER


@pytest.mark.parametrize("raw", [{"t": "vers", "node": "n", "version": 1, "cycle": HUGE, "gap": 1, "nodes": 5,
                                  "splits": 4, "n_hosts": 3}, {"t": "vers", "node": "n", "version": 1, "cycle": math.inf,
                                  "gap": 1, "nodes": 5, "splits": 4, "n_hosts": 3}, {"t": "init", "node": HUGE},
                                 {"t": HUGE}, {"t": "ping", "node": "n", "history": HUGE}], ids=_id)
def test_actor_message_with_a_huge_or_infinite_number(raw: dict[str, Any]) -> None:
    """A ``vers`` with cycle 10**5000 passed decode and raised OverflowError in the core's timers."""
    with pytest.raises(actor_messages.DecodeError):
        actor_messages.decode(raw)


@pytest.mark.parametrize("value", [HUGE, {"k": [HUGE]}], ids=_id)
def test_spark_json_of_a_huge_int(value: Any) -> None:
    """json.dumps raised ValueError (4300-digit limit): the int is written as its hex string."""
    assert hex(HUGE) in to_json(value)


def test_spark_json_of_a_timestamp_utc_cannot_hold() -> None:
    """Year 1 at +05:00 overflowed ``astimezone(UTC)``: written with its own offset."""
    value = codec.decode(bytes.fromhex("c07819303030312d30312d30315430303a30303a30302b30353a3030"))
    assert to_json(value) == '"0001-01-01T00:00:00+05:00"'


def test_queue_commands_are_registered() -> None:
    assert isinstance(sc.decode_command(qc.Forget(1.0).to_wire()), qc.Forget)
