import os

import cbor2
import pytest

from broker_mqtt.wire.codec import DecodeError
from broker_mqtt.wire.message import FORMAT_VERSION, Kind, NodeEncoder, NodeMessage, decode_batch, encode_node

SENDER = os.urandom(16)


def test_wire_bytes_are_the_plain_cbor_array_and_round_trip() -> None:
    enc = NodeEncoder(SENDER)
    payload = cbor2.dumps([1, "test"])
    receivers = (os.urandom(16), os.urandom(16))
    for kind in Kind:
        for rcv in (None, receivers):
            wire = enc.encode(kind, "/a/b", payload, rcv)
            plain = [FORMAT_VERSION, int(kind), SENDER, None if rcv is None else list(rcv), 16, "/a/b", payload]
            assert wire == cbor2.dumps(plain)
            assert encode_node(kind, SENDER, rcv, 16, "/a/b", payload) == wire
            (msg,), err = decode_batch(wire)
            assert err is None
            assert msg == NodeMessage(kind, SENDER, rcv, 16, "/a/b", payload)


def test_batch_is_a_cbor_sequence() -> None:
    enc = NodeEncoder(SENDER)
    wire = b"".join(enc.encode(Kind.DATA, f"/t/{i}", cbor2.dumps(i)) for i in range(100))
    msgs, err = decode_batch(wire)
    assert err is None
    assert [cbor2.loads(m.payload) for m in msgs] == list(range(100))


def test_good_messages_before_a_bad_one_survive() -> None:
    enc = NodeEncoder(SENDER)
    good = enc.encode(Kind.DATA, "/t", cbor2.dumps(1)) * 3
    msgs, err = decode_batch(good + b"\xff\x00garbage")
    assert len(msgs) == 3 and isinstance(err, DecodeError)


def test_every_truncation_is_a_decode_error_never_a_crash() -> None:
    wire = NodeEncoder(SENDER).encode(Kind.DATA, "/topic", cbor2.dumps({"k": [1, 2, 3]}))
    for cut in range(len(wire)):
        msgs, err = decode_batch(wire[:cut])
        assert msgs == [] and isinstance(err, DecodeError)


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ([2, 0, SENDER, None, 16, "/t", b""], "format version"),
        ([FORMAT_VERSION, 9, SENDER, None, 16, "/t", b""], "unknown kind"),
        ([FORMAT_VERSION, 0, b"short", None, 16, "/t", b""], "sender"),
        ([FORMAT_VERSION, 0, SENDER, [b"x"], 16, "/t", b""], "receiver"),
        ([FORMAT_VERSION, 0, SENDER, None, -1, "/t", b""], "ttl"),
        ([FORMAT_VERSION, 0, SENDER, None, 16, 5, b""], "topic"),
        ([FORMAT_VERSION, 0, SENDER, None, 16, "/t", "str"], "payload"),
        ({"not": "an array"}, "7-item array"),
    ],
)
def test_malformed_envelopes_are_named(item: object, words: str) -> None:
    msgs, err = decode_batch(cbor2.dumps(item))
    assert msgs == [] and err is not None and words in str(err)


def test_empty_payload_is_an_error() -> None:
    assert decode_batch(b"")[1] is not None


@pytest.mark.parametrize("seeks_back", [True, False], ids=["position-check", "re-encode-check"])
def test_fast_path_never_accepts_what_the_exact_path_would_refuse(seeks_back: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A stray break byte or trailing bytes fall back to the exact decoder, which keeps the
    good prefix and names the error; a non-canonical foreign encoding is accepted. Both ways of
    telling whether the fast path decoded exactly the input are checked."""
    import broker_mqtt.wire.message

    monkeypatch.setattr(broker_mqtt.wire.message, "_DECODER_SEEKS_BACK", seeks_back)
    enc = NodeEncoder(SENDER)
    good = enc.encode(Kind.DATA, "/t", cbor2.dumps(1))
    for tail in (b"\xff", b"\xff\xf7", b"\x00", b"\xff\xff\x01"):
        msgs, err = decode_batch(good * 2 + tail)
        assert len(msgs) == 2 and err is not None
    # 1 encoded on two bytes (0x18 0x01) instead of one: valid CBOR, not canonical.
    foreign = b"\x87\x18\x01" + good[2:]
    (msg,), err = decode_batch(foreign)
    assert err is None and msg.kind is Kind.DATA


def test_encode_many_is_encode_for_each_payload() -> None:
    enc = NodeEncoder(SENDER)
    payloads = [os.urandom(n) for n in (0, 1, 23, 24, 255, 256, 65_535, 65_536)]
    for receivers, ttl in ((None, 16), ((os.urandom(16),), 3)):
        for kind in Kind:
            many = enc.encode_many(kind, "/a/b", payloads, receivers, ttl)
            assert many == [enc.encode(kind, "/a/b", p, receivers, ttl) for p in payloads]
    assert enc.encode_many(Kind.DATA, "/a", []) == []


def test_a_version_that_only_equals_1_is_not_version_1() -> None:
    import uuid

    import cbor2

    from broker_mqtt.wire.message import decode_batch

    for version in (1.0, True):
        messages, error = decode_batch(cbor2.dumps([version, 0, uuid.uuid4().bytes, None, 16, "/a", b"\x01"]))
        assert messages == [] and error is not None and "format version" in str(error)
