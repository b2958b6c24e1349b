"""The transport's own PUBLISH decoder: what paho decodes, it decodes alike; what it leaves to paho,
it leaves whole (None), whatever the bytes."""

from __future__ import annotations

import asyncio
import gc
import random

import pytest
from paho.mqtt import _packet
from paho.mqtt.client import MQTTv5
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties, VariableByteIntegers

from broker_mqtt.transport import mqtt
from broker_mqtt.transport.base import ConnectionClosed, Received
from broker_mqtt.transport.publish_packet import take_publish


def _varint(n: int) -> bytes:
    return bytes(VariableByteIntegers.encode(n))


def _packet_bytes(topic: bytes, payload: bytes, *, qos: int = 1, retain: bool = False, dup: bool = False,
                  mid: int = 7, props: bytes = b"\x00") -> bytes:
    """A PUBLISH as a broker sends it; ``props``: the properties with their length (Properties.pack())."""
    var = len(topic).to_bytes(2, "big") + topic + (mid.to_bytes(2, "big") if qos else b"") + props
    body = var + payload
    return bytes([0x30 | (8 if dup else 0) | (qos << 1) | int(retain)]) + _varint(len(body)) + body


def _paho(packet: bytes) -> Received:
    """What paho decodes from ``packet`` (a whole PUBLISH), as the transport hands it on."""
    at = 1
    while packet[at] & 0x80:
        at += 1
    got = _packet.decode_publish(packet[0], bytearray(packet[at + 1:]), MQTTv5)
    sub_ids = getattr(got.properties, "SubscriptionIdentifier", None)
    return Received(got.topic.decode("utf-8"), bytes(got.payload), got.qos, bool(got.retain),
                    tuple(sub_ids) if sub_ids else ())


def _random_props(rng: random.Random) -> Properties:
    props = Properties(PacketTypes.PUBLISH)
    for _ in range(rng.randrange(4)):
        props.SubscriptionIdentifier = rng.choice([1, 127, 128, 16_383, 16_384, 2_097_152, 268_435_455])
    if rng.random() < 0.3:
        props.PayloadFormatIndicator = rng.randrange(2)
    if rng.random() < 0.3:
        props.MessageExpiryInterval = rng.randrange(2**32)
    if rng.random() < 0.3:
        props.ContentType = rng.choice(["", "application/cbor", "tëxt/ü"])
    if rng.random() < 0.3:
        props.ResponseTopic = "reply/" + "x" * rng.randrange(300)
    if rng.random() < 0.3:
        props.CorrelationData = bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
    for _ in range(rng.randrange(3)):
        props.UserProperty = (f"k{rng.randrange(9)}", "v" * rng.randrange(5))
    return props


def test_decodes_as_paho_does_one_packet_after_another() -> None:
    rng = random.Random(20)
    stream, expected = b"", []
    for i in range(400):
        qos = rng.randrange(2)
        topic = rng.choice(["a", "bm/d/0123/$store/e/log", "ü/ñ/€", "x" * 1_000]).encode()
        payload = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 100, 3_000])))
        props = _random_props(rng).pack()
        packet = _packet_bytes(topic, payload, qos=qos, retain=rng.random() < 0.5, dup=rng.random() < 0.2,
                               mid=i + 1, props=props)
        got = take_publish(packet, 0)
        assert got is not None and got.end == len(packet)
        assert got.received == _paho(packet)
        assert got.packet_id == (i + 1 if qos else 0)
        stream += packet
        expected.append(got.received)
    pos, taken = 0, []
    while (got := take_publish(stream, pos)) is not None:
        taken.append(got.received)
        pos = got.end
    assert taken == expected and pos == len(stream)


def test_a_packet_not_read_in_full_is_left_to_paho() -> None:
    props = Properties(PacketTypes.PUBLISH)
    props.SubscriptionIdentifier = 300
    props.UserProperty = ("a", "b")
    packet = _packet_bytes(b"t/1", b"payload" * 30, props=props.pack())
    for cut in range(len(packet)):
        assert take_publish(packet[:cut], 0) is None
        assert take_publish(b"\x30\x00" * 3 + packet[:cut], 6) is None  # past others already taken
    assert take_publish(packet, 0) is not None


@pytest.mark.parametrize("case", [
    "qos2", "topic alias", "empty topic", "topic not utf-8", "wildcard +", "wildcard #", "qos3",
    "not a publish property", "property past its length", "subscription id 0", "format indicator 2",
    "content type twice", "byte order mark in a property", "packet id 0 at qos 1", "string property not utf-8", "props past the packet",
    "remaining length of five bytes", "no packet id", "puback", "suback", "pingresp", "connack", "disconnect",
])
def test_what_it_leaves_to_paho(case: str) -> None:
    packets = {
        "qos2": _packet_bytes(b"t", b"x", qos=2),
        "topic alias": _packet_bytes(b"t", b"x", props=b"\x03\x23\x00\x01"),
        "empty topic": _packet_bytes(b"", b"x", props=b"\x03\x23\x00\x01"),
        "topic not utf-8": _packet_bytes(b"t/\xff", b"x"),
        "wildcard +": _packet_bytes(b"t/+", b"x"),
        "wildcard #": _packet_bytes(b"t/#", b"x"),
        "qos3": bytes([0x36]) + _packet_bytes(b"t", b"x")[1:],
        "not a publish property": _packet_bytes(b"t", b"x", props=b"\x05\x11\x00\x00\x00\x01"),  # session expiry
        "property past its length": _packet_bytes(b"t", b"x", props=b"\x03\x03\x00\x05abc"),
        "subscription id 0": _packet_bytes(b"t", b"x", props=b"\x02\x0b\x00"),
        "format indicator 2": _packet_bytes(b"t", b"x", props=b"\x02\x01\x02"),
        "content type twice": _packet_bytes(b"t", b"x", props=b"\x08\x03\x00\x01a\x03\x00\x01b"),
        "byte order mark in a property": _packet_bytes(b"t", b"x", props=b"\x06\x03\x00\x03\xef\xbb\xbf"),
        "packet id 0 at qos 1": _packet_bytes(b"t", b"x", mid=0),
        "string property not utf-8": _packet_bytes(b"t", b"x", props=b"\x04\x03\x00\x01\xff"),
        "props past the packet": _packet_bytes(b"t", b"", props=b"\x09\x0b\x01"),
        "remaining length of five bytes": b"\x32\xff\xff\xff\xff\x01" + b"\x00" * 64,
        "no packet id": b"\x32\x03\x00\x01t",
        "puback": b"\x40\x02\x00\x07",
        "suback": b"\x90\x03\x00\x01\x00",
        "pingresp": b"\xd0\x00",
        "connack": b"\x20\x03\x00\x00\x00",
        "disconnect": b"\xe0\x00",
    }
    assert take_publish(packets[case], 0) is None


def test_random_bytes_never_raise() -> None:
    rng = random.Random(5)
    props = _random_props(random.Random(1))
    props.ContentType = "c"
    props.UserProperty = ("k", "v")
    goods = [_packet_bytes(b"t/1", b"abc", props=b"\x02\x0b\x05"), _packet_bytes(b"t/2", b"", props=props.pack())]
    for _ in range(40_000):
        data = bytearray(rng.choice(goods))
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        got = take_publish(bytes(data), 0)
        if got is not None:  # then paho decodes it alike
            assert got.received == _paho(bytes(data[:got.end]))


class _Client:  # the two parts of aiomqtt's client that _Messages reads
    def __init__(self) -> None:
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._disconnected: asyncio.Future[None] = asyncio.get_running_loop().create_future()


@pytest.mark.anyio
async def test_the_messages_queued_before_the_connection_went_come_first_then_it_stays_gone() -> None:
    client = _Client()
    messages = mqtt._Messages(client)  # type: ignore[arg-type]
    first, second = Received("a", b"1", 1), Received("b", b"2", 0, True, (3,))
    client._queue.put_nowait(first)

    async def later() -> None:
        await asyncio.sleep(0)
        client._queue.put_nowait(second)
        client._disconnected.set_exception(OSError("reset"))

    task = asyncio.get_running_loop().create_task(later())
    assert [await messages.__anext__(), await messages.__anext__()] == [first, second]
    with pytest.raises(ConnectionClosed, match="Disconnected"):
        await messages.__anext__()
    client._queue.put_nowait(Received("late", b"", 0))  # read after the loss: never handed on
    with pytest.raises(ConnectionClosed, match="Disconnected"):
        await messages.__anext__()
    await task


@pytest.mark.anyio
async def test_a_backlog_gives_the_other_tasks_a_turn_every_read_burst() -> None:
    client = _Client()
    messages = mqtt._Messages(client)  # type: ignore[arg-type]
    n = 4 * mqtt.READ_BURST
    for i in range(n):
        client._queue.put_nowait(Received("t", str(i).encode()))
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(other())
    await asyncio.sleep(0)
    start = turns
    got = [await messages.__anext__() for _ in range(n)]
    assert [m.payload for m in got] == [str(i).encode() for i in range(n)]
    assert turns - start >= n // mqtt.READ_BURST - 1  # the old iterator's fairness, no less
    task.cancel()


@pytest.mark.anyio
async def test_a_connection_lost_while_nobody_reads_leaves_no_unretrieved_exception() -> None:
    """The endpoint may stop reading before the marker (its connection task ended on a failed
    publish first): aiomqtt's disconnect future must not then log "Future exception was never
    retrieved" when it is collected (seen once in 333 cuts of a writer's connection)."""
    loop = asyncio.get_running_loop()
    reported: list[object] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context.get("message")))
    try:
        client = _Client()
        mqtt._Messages(client)  # type: ignore[arg-type]
        client._disconnected.set_exception(OSError("reset"))
        await asyncio.sleep(0)  # its done callbacks run
        del client
        gc.collect()
    finally:
        loop.set_exception_handler(old)
    assert reported == []
