"""Fuzz targets: every decoder that reads bytes or values from the network, and how to mutate its input.

Shared by ``tests/test_fuzz_decoders.py`` (Hypothesis) and ``bench/fuzz.py`` (a million inputs). A
:class:`Target` takes the raw bytes of one MQTT payload, decodes them as the receiving code does and
returns whether the input was accepted; a *rejection* is either a documented error raised
(:attr:`Target.errors`) or a documented "malformed" result (``decode_batch``'s error, a presence
update marked malformed, ``MessageRecord.from_wire`` giving None). Anything else raised is a bug.

Inputs come from three generators over each target's valid :attr:`Target.seeds` (wire values, packed
by :attr:`Target.wrap`): random bytes, byte-level mutations of valid encodings (bit flips,
interesting bytes, truncation, insertion, splices of two encodings) and structured mutations of the
wire values (a field replaced by a hostile value: wrong type, huge or negative int, NaN, deep
nesting, long list, unknown kind; a field dropped or added).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncactor.messages as actor_messages
from asyncactor import ActorCore, Config
from broker_mqtt import channel as ch
from broker_mqtt.endpoint.presence import PeerTable, presence_payload
from broker_mqtt.errors import DecodeError
from broker_mqtt.queue import commands as qc
from broker_mqtt.queue.model import MessageRecord, MessageState, record_state
from broker_mqtt.spark.document import to_json
from broker_mqtt.store import commands as sc
from broker_mqtt.store import replica_messages as rm
from broker_mqtt.store.discovery import MasterIs, Query, decode_store_message
from broker_mqtt.store.errors import StoreDecodeError, StoreError
from broker_mqtt.store.history import Conflict, Record, Version
from broker_mqtt.store.log_ops import compute_op
from broker_mqtt.store.replica_events import Role
from broker_mqtt.store.versioned import VersionedState
from broker_mqtt.wire import codec
from broker_mqtt.wire.data import Count, EnumValue, Port, PortProtocol
from broker_mqtt.wire.identity import default_client_id
from broker_mqtt.wire.message import Kind, NodeEncoder, decode_batch, encode_node
from broker_mqtt.wire.topics import TopicLayout

__all__ = ["Target", "TARGETS", "by_name", "random_bytes", "mutate_bytes", "mutate_value", "generate", "hostile_leaf"]


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[bytes], bool]  #: True: accepted; False: rejected as malformed (documented)
    errors: tuple[type[BaseException], ...]  #: the documented errors ``run`` may raise
    seeds: tuple[Any, ...]  #: valid wire values
    wrap: Callable[[Any], bytes] = codec.encode  #: a wire value -> the payload bytes

    def encodings(self) -> list[bytes]:
        return [self.wrap(s) for s in self.seeds]

    def outcome(self, data: bytes) -> bool:
        """``run(data)``, a documented error counting as a rejection (False); anything else propagates."""
        try:
            return self.run(data)
        except self.errors:
            return False


def _on_value(decoder: Callable[[Any], Any]) -> Callable[[bytes], bool]:
    """A decoder of wire values, fed as the receiver does: the payload through ``codec.decode`` first."""
    def run(data: bytes) -> bool:
        try:
            value = codec.decode(data)
        except DecodeError:
            return False
        decoder(value)
        return True
    return run


# -- the hostile values --------------------------------------------------------------------------------

_TZ = dt.timezone(dt.timedelta(hours=5))


def _deep(depth: int) -> Any:
    v: Any = 0
    for _ in range(depth):
        v = [v]
    return v


_LEAVES: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, 2, 2**31, 2**63, 2**64, -(2**64) - 1, 10**5000, -(10**5000), 0.0, -0.0,
    math.nan, math.inf, -math.inf, 1e308, -1e-308, "", "x", "x" * 5000, "\x00/#+", "n" * 32, b"", bytes(16),
    b"\xf7" * 20, [], {}, [[]], [None], {"t": "ping"}, {1: 2}, {(1, 2): None}, frozenset({1, "a"}),
    Count(2**64 - 1), Port(65535, PortProtocol.TCP), dt.timedelta(days=999_999_999), EnumValue("x"),
    dt.datetime(1, 1, 1, tzinfo=_TZ), dt.datetime(9999, 12, 31, 23, 59, tzinfo=_TZ),
    ipaddress.IPv4Address("10.0.0.1"), ipaddress.IPv6Network("2001:db8::/32"),
    "hb", "put", "ping", "events", "many", "ready", "accept", "master", "store_query", "queue_settle",
    [0] * 20_000, _deep(350), [1, "n" * 32], [[1, "n" * 32], 3], ["put", 1, 2, None],
)


_BIG = (_LEAVES[-5], _LEAVES[-4])  # never copied, never mutated in place
_BIG_IDS = frozenset(map(id, _BIG))


_NUMBERS = (math.inf, -math.inf, math.nan, 10**5000, -(10**5000), -1, 0, 2**64, 1.5, True, "1", None)


def hostile_leaf(rng: random.Random) -> Any:
    leaf = rng.choice(_NUMBERS if rng.random() < 0.3 else _LEAVES)
    return leaf if id(leaf) in _BIG_IDS else _copy(leaf)


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def _copy(v: Any, depth: int = 0) -> Any:
    """A copy of a seed's containers (seeds are shallow: no deep leaves are copied)."""
    if depth > 20:
        return v
    if isinstance(v, list | tuple):
        return [_copy(x, depth + 1) for x in v]
    if isinstance(v, dict):
        return {k: _copy(x, depth + 1) for k, x in v.items()}
    return v


def _containers(v: Any, out: list[Any], depth: int = 0) -> list[Any]:
    if isinstance(v, list | dict) and depth < 8 and len(out) < 200 and id(v) not in _BIG_IDS:
        out.append(v)
        children = list(v.values()) if isinstance(v, dict) else v
        for x in children[:50]:
            _containers(x, out, depth + 1)
    return out


def mutate_value(value: Any, rng: random.Random, rounds: int | None = None) -> Any:
    """``value`` (a wire value) with 1..3 structural mutations; the original is not changed."""
    value = _copy(value)
    for _ in range(rounds or rng.randint(1, 3)):
        found = _containers(value, [])
        if not found or rng.random() < 0.03:
            return hostile_leaf(rng)
        c = rng.choice(found)
        op = rng.randrange(5)
        if isinstance(c, list):
            if not c or op == 0:
                c.insert(rng.randint(0, len(c)), hostile_leaf(rng))
            elif op == 1:
                del c[rng.randrange(len(c))]
            elif op == 2:
                c.append(_copy(rng.choice(c)))
            else:
                c[rng.randrange(len(c))] = hostile_leaf(rng)
        else:
            keys = list(c)
            if not keys or op == 0:
                k = hostile_leaf(rng)
                c[k if _hashable(k) else "k"] = hostile_leaf(rng)
            elif op == 1:
                del c[rng.choice(keys)]
            else:
                c[rng.choice(keys)] = hostile_leaf(rng)
    return value


# -- byte-level mutations ------------------------------------------------------------------------------

_INTERESTING = (0x00, 0x01, 0x17, 0x18, 0x1B, 0x3B, 0x5B, 0x5F, 0x7B, 0x7F, 0x80, 0x9B, 0x9F, 0xA0, 0xBB, 0xBF,
                0xC0, 0xC1, 0xC2, 0xD8, 0xD9, 0xDA, 0xF4, 0xF6, 0xF7, 0xF9, 0xFA, 0xFB, 0xFF)


def random_bytes(rng: random.Random) -> bytes:
    n = rng.choice((0, 1, 2, 3, 5, 9, 17, 40, 200))
    if rng.random() < 0.5:  # CBOR-ish: heads that declare things
        return bytes(rng.choice(_INTERESTING) if rng.random() < 0.6 else rng.randrange(256) for _ in range(n))
    return rng.randbytes(n)


def mutate_bytes(data: bytes, rng: random.Random, other: bytes = b"") -> bytes:
    """``data`` with 1..4 byte-level mutations (``other``: a second encoding to splice in)."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(i, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[min(i, len(b) - 1)] = rng.choice(_INTERESTING)
        elif op == 2:
            del b[i:]
        elif op == 3:
            b[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 4 and b:
            j = rng.randrange(len(b))
            del b[min(i, j):max(i, j) + 1]
        elif op == 5 and other:
            j = rng.randrange(len(other) + 1)
            b = b[:i] + other[j:] if rng.random() < 0.5 else b[:i] + other[:j]
        elif op == 6 and b:
            j = rng.randrange(len(b))
            b[i:i] = b[min(i, j):max(i, j)]
        else:
            b[i:i] = bytes((rng.choice((0x9B, 0xBB, 0x5B, 0x7B, 0x9A, 0x5A)),)) + b"\x7f" + rng.randbytes(7)
    return bytes(b)


def generate(target: Target, rng: random.Random, encodings: list[bytes] | None = None) -> bytes:
    """One input for ``target``: random bytes (10%), a byte mutation (45%) or a value mutation (45%)."""
    encodings = encodings if encodings is not None else target.encodings()
    r = rng.random()
    if r < 0.1:
        return random_bytes(rng)
    if r < 0.55:
        return mutate_bytes(rng.choice(encodings), rng, rng.choice(encodings))
    return target.wrap(mutate_value(rng.choice(target.seeds), rng))


# -- the targets --------------------------------------------------------------------------------------

PEER = uuid.UUID(int=0x1234)
ME = uuid.UUID(int=0x5678)
LAYOUT = TopicLayout("fz")
N1, N2 = "a" * 32, "b" * 32
EPOCH = [3, N1]
POS = [7, EPOCH]

_VALUES: tuple[Any, ...] = (
    None, True, 1, -1, 2**70, 1.5, "text", b"\x00\x01", [1, [2, "x"]], {"k": [1, 2], 3: None}, {1, 2},
    Count(5), Port(443, PortProtocol.TCP), dt.timedelta(seconds=1.5), EnumValue("Conn::LOG"),
    dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC), ipaddress.IPv4Address("192.0.2.1"),
    ipaddress.IPv6Network("2001:db8::/48"), {(1, 2): frozenset({3})},
)


def _codec_run(data: bytes) -> bool:
    codec.decode(data)
    return True


def _many_run(data: bytes) -> bool:
    """decode_many of the input cut in three and whole, against decode of each: equal, never raising."""
    cut = sorted((len(data) // 3, 2 * len(data) // 3))
    parts = [data[:cut[0]], data[cut[0]:cut[1]], data[cut[1]:], data]
    many = codec.decode_many(parts)
    for p, got in zip(parts, many, strict=True):
        try:
            want: Any = codec.decode(p)
        except DecodeError as exc:
            want = exc
        if isinstance(want, DecodeError):
            if not isinstance(got, DecodeError) or str(got) != str(want):
                raise AssertionError(f"decode_many gave {got!r:.80} where decode raised {want}")
        elif isinstance(got, DecodeError):
            raise AssertionError(f"decode_many gave {got} where decode gave a value")
    return not isinstance(many[-1], DecodeError)  # accepted: the whole input decodes


def _node_seeds() -> tuple[Any, ...]:
    return tuple([1, k, PEER.bytes, r, 16, t, codec.encode(v)]
                 for k, r, t, v in ((0, None, "/a/b", 1), (1, [ME.bytes], "/$store/s/e", ["hb"]),
                                    (2, [ME.bytes, PEER.bytes], "presence", {"op": "hello"}), (0, None, "", None)))


def _batch_run(data: bytes) -> bool:
    messages, error = decode_batch(data)
    if error is not None and not isinstance(error, DecodeError):
        raise AssertionError(f"decode_batch returned {error!r} as its error")
    for m in messages:  # what it returns is well-formed
        assert m.kind in tuple(Kind) and len(m.sender) == 16 and isinstance(m.payload, bytes)
    return error is None


def _presence_wrap(body: Any) -> bytes:
    return NodeEncoder(PEER.bytes).encode(Kind.CONTROL, "presence", codec.encode(body))


def _presence_run(data: bytes) -> bool:
    table = PeerTable(LAYOUT, ME)
    update = table.receive(LAYOUT.presence(default_client_id(PEER)), data)
    return not update.malformed


def _channel_seeds() -> tuple[Any, ...]:
    msgs = (ch.Handshake("p", "c", 1, 0.5, [[1, 2]]), ch.Event("p", 3, {"x": 1}), ch.EventBatch("p", 2, (1, [2])),
            ch.RetransmitFailed("p", "c", 2, 5), ch.Heartbeat("p", 0), ch.CumulativeAck("c", "p", 9),
            ch.Nack("c", "p", ((1, 2), (4, 4))))
    return tuple(m.to_wire() for m in msgs)


def _store_seeds() -> tuple[Any, ...]:
    msgs = (sc.Put("k", 1, 2.5), sc.Put("k", [1], None, "w1"), sc.PutUnique("k", 2, None, "me", 3), sc.Erase(1),
            sc.Erase(1, "w"), sc.Clear(), sc.Clear("w"), sc.Increment("k", 2, None), sc.Decrement("k", 1, 3),
            sc.Append("s", "s", None), sc.InsertInto("t", 1, 2, None), sc.RemoveFrom("t", 1, None), sc.Push("v", 1),
            sc.Pop("v", None), sc.Expire("k"), sc.PutUniqueResult("me", 3, True),
            sc.RequestFailed("me", 3, StoreError("boom")), sc.AttachClone("clone", 2))
    return (*(m.to_wire() for m in msgs), [["k", 1], [2, [3]]], Query("q" * 32).to_wire(), MasterIs(N1).to_wire())


def _store_run(data: bytes) -> bool:
    """Every store-message decoder on the same value (each must decode or raise StoreDecodeError)."""
    try:
        value = codec.decode(data)
    except DecodeError:
        return False
    accepted = False
    for decoder in (sc.decode_command, sc.decode_broadcast, sc.decode_control, sc.snapshot_from_wire,
                    decode_store_message, sc.PutUnique.from_wire):
        try:
            decoder(value)
            accepted = True
        except (StoreDecodeError, ch.ChannelDecodeError):
            pass
    return accepted


def _state() -> VersionedState:
    state = VersionedState()
    for seq, op in enumerate((("put", "k", 1, None), ("put", "s", "txt", None), ("put", "v", [1], None),
                              ("put", "t", {1: 2}, None), ("put", 1, qc.MessageRecord(1).to_wire(), None)), 1):
        state.apply(Record(seq, (1, N1), seq, N1, "w", seq, op))
    return state


def _writes() -> tuple[Any, ...]:
    """The seeds a master accepts as writes (plain and queue commands)."""
    out = []
    for wire in (*_store_seeds(), *_queue_seeds()):
        try:
            if not isinstance(sc.decode_command(wire), sc.Expire):
                out.append(wire)
        except StoreDecodeError:
            pass
    return tuple(out)


def _compute_run(data: bytes) -> bool:
    """What a master does with a write it receives: decode it, compute its effect, apply it."""
    try:
        value = codec.decode(data)
        cmd = sc.decode_command(value)
    except DecodeError:
        return False
    state = _state()
    op, _ = compute_op(state, cmd, 1_700_000_000.0)  # type: ignore[arg-type]
    state.apply(Record(state.last_seq + 1, (1, N1), 10**6, N1, "w", 9, op))
    return True


def _queue_seeds() -> tuple[Any, ...]:
    cmds = (qc.Publish([1, "x"], 3), qc.Acquire("o", 2, 30.0), qc.Settle("o", [[1, "accept", None], [2, "release",
            "why", 2]]), qc.ReleaseOwner("o", "gone", True), qc.Renew("o", 5.0), qc.RegisterReader("r", "oldest"),
            qc.CommitReader("r", 4), qc.RemoveReader("r"), qc.Forget(60.0))
    return (*(c.to_wire() for c in cmds), MessageRecord("d", MessageState.ACQUIRED, "o", 1, 3, None).to_wire())


def _record_run(data: bytes) -> bool:
    try:
        value = codec.decode(data)
    except DecodeError:
        return False
    rec = MessageRecord.from_wire(value)
    state = record_state(value)
    if (rec is None) != (state is None):
        raise AssertionError("MessageRecord.from_wire and record_state disagree")
    return rec is not None


def _replica_seeds() -> tuple[Any, ...]:
    rec = Record(8, (3, N1), 99, N1, "w", 1, ("put", "k", 1, None), None)
    many = Record(9, (3, N1), 100, N1, "w", 2, ("many", [("erase", "k"), ("clear",)]), [1])
    ver = Version("v", 5, N1, 2, False, None)
    msgs = (rm.Heartbeat(N1, (3, N1), Role.MASTER, (7, (3, N1)), N1), rm.Heartbeat(N2, None, Role.FOLLOWER, (0, None),
            None), rm.Claim((4, N2), (7, (3, N1))), rm.Promise((4, N2), N1, (7, (3, N1)), [((3, N1), 0)], 7),
            rm.Fetch((4, N2), N2, N1, (5, (3, N1))),
            rm.Tail((3, N1), N2, [rec], 9, N1), rm.Tail((3, N1), "other", [rec, many], 9, N1),
            rm.Snap((3, N1), N2, {"seq": 1}, N1), rm.Active((4, N2), (7, (3, N1)), [((3, N1), 0)],
            [Conflict("k", ver, ver)], [([((2, N2), 0)], 4)]), rm.Log((3, N1), [rec, many]),
            rm.Ack((3, N1), N2, 8), rm.Write(N2, 1, N2, ["put", "k", 1, None], (3, N1)),
            rm.WriteAck((3, N1), N2, 1, {1: None, 2: ["error", "stale", "x"]}, N2), rm.Resign((3, N1), (7, (3, N1))))
    return tuple(rm.encode(m) for m in msgs)


def _snapshot_seeds() -> tuple[Any, ...]:
    return (_state().to_wire(),)


def _actor_seeds() -> tuple[Any, ...]:
    msgs = (actor_messages.Init("n1"), actor_messages.Vers("n1", Config(cycle=5, gap=1, version=2)),
            actor_messages.Ping("n1", 4, ("n1", "n2")), actor_messages.Hist(None, ("n2", "n1")))
    return tuple(actor_messages.encode(m) for m in msgs)


def _actor_run(data: bytes) -> bool:
    """The election path: the MQTT transport's dict check, then the sans-io core (never raises)."""
    try:
        value = codec.decode(data)
    except DecodeError:
        return False
    if not isinstance(value, dict):
        return False
    try:
        actor_messages.decode(value)
        accepted = True
    except actor_messages.DecodeError:
        accepted = False
    core = ActorCore("n0", config=Config(cycle=5, gap=1), rng=random.Random(0))
    core.start(0.0)
    core.receive({"t": "init", "node": "n0"}, 0.1)
    core.receive(value, 0.2)
    core.receive(value, 3.0)
    core.timer(100.0)
    core.to_send()
    core.events()
    return accepted


def _spark_run(data: bytes) -> bool:
    try:
        value = codec.decode(data)
    except DecodeError:
        return False
    to_json(value)
    return True


TARGETS: tuple[Target, ...] = (
    Target("codec.decode", _codec_run, (DecodeError,), _VALUES),
    Target("codec.decode_many", _many_run, (), _VALUES),
    Target("node message (decode_batch)", _batch_run, (), _node_seeds()),
    Target("presence", _presence_run, (), ({"op": "hello", "name": "n", "topics": ["/a", "/b"]}, {"op": "bye"}),
           wrap=_presence_wrap),
    Target("channel", _on_value(ch.decode_message), (ch.ChannelDecodeError,), _channel_seeds()),
    Target("store commands", _store_run, (), _store_seeds()),
    Target("store compute (master applies a write)", _compute_run, (StoreError,), _writes()),
    Target("replication", _on_value(lambda v: rm.decode(v, me=N2)), (StoreDecodeError,), _replica_seeds()),
    Target("replication snapshot", _on_value(VersionedState.parts_from_wire), (StoreDecodeError,),
           _snapshot_seeds()),
    Target("queue commands", _on_value(sc.decode_command), (StoreDecodeError,), _queue_seeds()[:-1]),
    Target("queue message record", _record_run, (), _queue_seeds()[-1:]),
    Target("actor (asyncactor decode + core)", _actor_run, (), _actor_seeds()),
    Target("spark (data as JSON)", _spark_run, (), _VALUES),
)


def by_name(name: str) -> Target:
    return next(t for t in TARGETS if t.name == name)


def presence_valid_payload() -> bytes:
    return presence_payload(NodeEncoder(PEER.bytes), "hello", "n", ["/a"])


def node_message(topic: str, payload: Any) -> bytes:
    return encode_node(Kind.DATA, PEER.bytes, None, 16, topic, codec.encode(payload))
