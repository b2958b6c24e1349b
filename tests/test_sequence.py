"""Numbered node messages (issue 23): the sequence header, the outbox's numbering, the receiver's
tracker, and a gap reported for real when a crashed mosquitto loses acknowledged messages."""

from __future__ import annotations

import random

import anyio
import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_mqtt import ConnectionRestored, EmbeddedBroker, Endpoint, MessagesMissed
from broker_mqtt.endpoint.outbox import Outbox
from broker_mqtt.endpoint.sequence import IN_ORDER, SequenceTracker, Verdict
from broker_mqtt.wire.codec import DecodeError
from broker_mqtt.wire.message import Kind, NodeEncoder, decode_batch, decode_sequenced
from broker_mqtt.wire.sequence import SEQUENCE_TAG, sequence_header, split_sequence
from tests.transport.cuttable import CuttableRelay

SENDER = bytes(range(16))


# -- the header -----------------------------------------------------------------------------------

@given(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
def test_the_header_is_the_cbor_tag_and_splits_back(stream: int, first: int) -> None:
    header = sequence_header(stream, first)
    tag = cbor2.loads(header)
    assert (tag.tag, list(tag.value)) == (SEQUENCE_TAG, [stream, first])
    assert split_sequence(header + b"rest") == ((stream, first), len(header))


def test_a_batch_decodes_with_or_without_a_header() -> None:
    enc = NodeEncoder(SENDER)
    body = enc.encode(Kind.DATA, "/t", cbor2.dumps(1)) + enc.encode(Kind.DATA, "/t", cbor2.dumps(2))
    plain = decode_batch(body)
    assert decode_batch(sequence_header(7, 40) + body) == plain and plain[1] is None and len(plain[0]) == 2
    assert decode_sequenced(sequence_header(7, 40) + body) == ((7, 40), plain[0], None)
    assert decode_sequenced(body) == (None, plain[0], None)


@pytest.mark.parametrize("bad", [b"\xd9\x05\x53\x82", b"\xd9\x05\x53\x82\x01", b"\xd9\x05\x53\x82\x01\x1c",
                                 b"\xd9\x05\x53\x82\x1b" + b"\xff" * 8 + b"\x00"])
def test_a_malformed_header_is_a_decode_error_not_a_crash(bad: bytes) -> None:
    with pytest.raises(DecodeError):
        split_sequence(bad)
    header, messages, error = decode_sequenced(bad)
    assert (header, messages) == (None, []) and isinstance(error, DecodeError)


# -- the outbox numbers what it coalesces ------------------------------------------------------------

def test_batches_of_a_topic_continue_one_stream_and_raw_ones_are_not_numbered() -> None:
    box = Outbox(max_batch_bytes=10, rng=random.Random(1))
    for _ in range(3):
        box.add("t", 1, b"12345")  # two fit a batch
    box.add_many("t", 1, [b"1234567890", b"12"])
    box.add("t", 0, b"x")  # another QoS: another stream
    box.add("raw", 1, b"r", coalesce=False)
    box.add("p", 1, b"hello", retain=True)
    batches = []
    while (b := box.take()) is not None:
        batches.append(b)
    numbered = [(b.topic, b.qos, b.first, b.count) for b in batches if b.stream is not None]
    assert numbered == [("t", 1, 0, 2), ("t", 1, 2, 1), ("t", 1, 3, 1), ("t", 1, 4, 1), ("t", 0, 0, 1)]
    t1 = {b.stream for b in batches if b.topic == "t" and b.qos == 1}
    t0 = {b.stream for b in batches if b.topic == "t" and b.qos == 0}
    assert len(t1) == 1 and len(t0) == 1 and t1 != t0
    assert all(b.stream is None for b in batches if b.topic in ("raw", "p"))


def test_a_forgotten_stream_starts_afresh_never_reusing_numbers() -> None:
    box = Outbox(max_streams=2, rng=random.Random(2))
    box.add("a", 1, b"1")
    first = box.take()
    box.add("b", 1, b"1")
    box.add("c", 1, b"1")  # "a" is forgotten
    box.add("a", 1, b"2")
    later = [b for b in iter(box.take, None) if b.topic == "a"]
    assert first is not None and first.stream is not None
    assert later[0].stream != first.stream and later[0].first == 0


# -- the receiver's judgement ------------------------------------------------------------------------

def test_in_order_gap_repeat_late_and_a_new_stream() -> None:
    t = SequenceTracker()
    assert t.check("k", 5, 100, 3) is IN_ORDER  # the first seen sets the baseline
    assert t.check("k", 5, 103, 2) is IN_ORDER
    assert t.check("k", 5, 110, 1) == Verdict(missed=5)  # 105..109 never came
    assert t.check("k", 5, 103, 2) == Verdict(skip=2, repeated=2)  # a resend: dropped
    assert t.check("k", 5, 107, 2) == Verdict(late=2)  # reported missing, came after all: delivered
    assert t.check("k", 5, 107, 2) == Verdict(skip=2, repeated=2)  # ... but only once
    assert t.check("k", 5, 111, 1) is IN_ORDER
    assert t.check("k", 9, 0, 4) is IN_ORDER  # the publisher restarted: a new stream, a new baseline
    assert t.check("other", 5, 0, 1) is IN_ORDER  # another subscription has its own expectation
    assert t.check("k", 9, 2, 4) == Verdict(skip=2, repeated=2)  # overlapping the expected number


def test_a_forged_jump_ahead_costs_a_false_report_never_a_message() -> None:
    t = SequenceTracker()
    t.check("k", 5, 0, 10)
    assert t.check("k", 5, 1_000_000, 1) == Verdict(missed=999_990)  # a header that lies
    assert t.check("k", 5, 10, 3) == Verdict(late=3)  # the real next batch is still delivered
    assert t.check("k", 5, 13, 2) == Verdict(late=2)
    assert t.check("k", 5, 10, 3) == Verdict(skip=3, repeated=3)  # and a real repeat still dropped


def test_memory_is_bounded() -> None:
    t = SequenceTracker(max_streams=3, max_ranges=2)
    for k in range(10):
        t.check(k, 1, 0, 1)
    assert len(t) == 3
    for gap in range(5):
        t.check(9, 1, 10 * (gap + 1), 1)
    assert t.check(9, 1, 50, 1) == Verdict(skip=1, repeated=1)  # remembered
    assert t.check(9, 1, 0, 1) == Verdict(late=1)  # forgotten: a very old repeat passes, as documented


# -- for real: a crashed mosquitto loses what it acknowledged, and the subscriber is told --------------

@pytest.mark.anyio
@pytest.mark.mosquitto
async def test_messages_a_crashed_broker_lost_are_reported_as_missed() -> None:
    n = 50
    with EmbeddedBroker() as broker:
        relay = CuttableRelay(broker.port)
        try:
            fast = {"reconnect_delay": (0.02, 0.2)}
            async with Endpoint(f"mqtt://127.0.0.1:{relay.port}", name="sub", **fast) as sub_ep, \
                    Endpoint(broker, name="pub", **fast) as pub:
                async with sub_ep.subscribe("/s") as sub, sub_ep.status() as events:
                    got: list[int] = []
                    with anyio.fail_after(30):
                        for i in range(n):
                            await pub.publish("/s", i)
                        while len(got) < n:
                            got.append((await sub.__anext__()).data)
                        # The subscriber goes away; the broker acknowledges n more for its session,
                        # then dies before saving them.
                        relay.refusing = True
                        relay.cut()
                        for i in range(n, 2 * n):
                            await pub.publish("/s", i)
                        assert await pub.flush(10)
                        broker.kill()
                        await broker.arestart()
                        relay.refusing = False
                        async for event in events:  # resubscribed on the restarted broker
                            if isinstance(event, ConnectionRestored):
                                break
                        for i in range(2 * n, 3 * n):
                            await pub.publish("/s", i)
                        while len(got) < 2 * n:
                            got.append((await sub.__anext__()).data)
                        missed = [e async for e in _until_missed(events)]
            assert got == list(range(n)) + list(range(2 * n, 3 * n))
            assert [(e.sender, e.topic, e.missed) for e in missed] == [(pub.id, "/s", n)]
            assert sub_ep.statistics().missed == n
        finally:
            relay.close()


async def _until_missed(events: object) -> object:
    async for event in events:  # type: ignore[attr-defined]
        if isinstance(event, MessagesMissed):
            yield event
            return
