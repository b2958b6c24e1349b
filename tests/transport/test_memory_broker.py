"""The in-memory MQTT 5 broker: unit tests, and the same scenarios against real mosquitto.

The scenarios at the end run on both brokers (``world`` is ``memory`` or ``mosquitto``) with the
same assertions, so the in-memory broker is held to what mosquitto really does: one copy per
matching subscription, the RETAIN flag, No Local, takeover and the will on takeover.
"""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import pytest

from broker_mqtt import EmbeddedBroker
from broker_mqtt.transport.memory_broker import (
    NEVER_EXPIRES,
    ClientHandle,
    CloseReason,
    ConnAck,
    ConnectionClosed,
    Delivery,
    InvalidTopic,
    MemoryBroker,
    PacketTooLarge,
    ProtocolError,
    Will,
    publish_packet_size,
    topic_matches,
    validate_filter,
    validate_topic,
)


class Inbox:
    """Collects one client's deliveries and close reasons; acks QoS 1 unless told not to."""

    def __init__(self, *, ack: bool = True) -> None:
        self.items: list[Delivery] = []
        self.closes: list[CloseReason] = []
        self.ack = ack
        self.handle: ClientHandle | None = None

    def deliver(self, d: Delivery) -> None:
        self.items.append(d)
        if self.ack and d.packet_id is not None and self.handle is not None:
            self.handle.puback(d.packet_id)

    def take(self) -> list[Delivery]:
        out, self.items = self.items, []
        return out

    def payloads(self) -> list[bytes]:
        return [d.payload for d in self.take()]


def connect(broker: MemoryBroker, client_id: str, *, ack: bool = True, **kw: Any) -> tuple[ClientHandle, Inbox]:
    inbox = Inbox(ack=ack)
    handle = broker.connect(client_id, deliver=inbox.deliver, closed=inbox.closes.append, **kw)
    inbox.handle = handle
    for d in inbox.items:  # delivered during connect (a resumed session), before the handle was known
        if ack and d.packet_id is not None:
            handle.puback(d.packet_id)
    return handle, inbox


# -- topics --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("a/b", "a/b", True),
        ("a/b", "a/c", False),
        ("a/+", "a/b", True),
        ("a/+", "a/b/c", False),
        ("a/+", "a/", True),  # + matches an empty level
        ("+/+", "/finance", True),
        ("+", "/finance", False),
        ("a/#", "a", True),  # # matches the parent level too
        ("a/#", "a/b/c", True),
        ("a/#", "ab", False),
        ("#", "a/b", True),
        ("#", "$SYS/x", False),  # a leading wildcard does not match $ topics
        ("+/x", "$SYS/x", False),
        ("$SYS/#", "$SYS/x", True),
        ("$SYS/+", "$SYS/x", True),
        ("a/+/c", "a/b/c", True),
        ("a/+/c", "a/b/d", False),
        ("a/b/c", "a/b", False),
    ],
)
def test_topic_matching(topic_filter: str, topic: str, expected: bool) -> None:
    assert topic_matches(validate_filter(topic_filter), validate_topic(topic)) is expected


@pytest.mark.parametrize("bad", ["", "a/+", "a/#", "#", "a\0b", "x" * 65_536])
def test_bad_topics_are_refused(bad: str) -> None:
    with pytest.raises(InvalidTopic):
        validate_topic(bad)


@pytest.mark.parametrize("bad", ["", "a/#/b", "a#", "a/b#", "a+/b", "a/+b", "a\0", "$share/g/a"])
def test_bad_filters_are_refused(bad: str) -> None:
    with pytest.raises(InvalidTopic):
        validate_filter(bad)


def test_bad_topics_raise_from_the_api_and_change_nothing() -> None:
    broker = MemoryBroker()
    c, _ = connect(broker, "c")
    with pytest.raises(InvalidTopic, match="wildcard"):
        c.publish("a/+", b"x")
    with pytest.raises(InvalidTopic, match="whole level"):
        c.subscribe("a/b#")
    with pytest.raises(InvalidTopic):
        broker.connect("w", deliver=lambda d: None, will=Will("a/#"))
    assert not broker.has_session("w")
    with pytest.raises(InvalidTopic, match="must be a str"):
        c.publish(b"a", b"x")  # type: ignore[arg-type]  # the error under test
    assert not c.closed


# -- delivery, subscription options ---------------------------------------------------------------


def test_qos_is_the_minimum_and_qos1_needs_puback() -> None:
    broker = MemoryBroker()
    s, inbox = connect(broker, "s", ack=False)
    p, _ = connect(broker, "p")
    s.subscribe("q0", qos=0)
    s.subscribe("q1", qos=1)
    p.publish("q0", b"a", qos=1)
    p.publish("q1", b"b", qos=0)
    p.publish("q1", b"c", qos=1)
    got = inbox.take()
    assert [(d.payload, d.qos, d.packet_id) for d in got] == [(b"a", 0, None), (b"b", 0, None), (b"c", 1, 1)]
    s.puback(1)
    s.puback(1)  # idempotent
    s.puback(999)  # unknown: ignored
    s.drop()
    s2, inbox2 = connect(broker, "s", clean_start=False, session_expiry=10)
    assert inbox2.take() == []  # nothing unacknowledged (and the session had expiry 0 anyway)


def test_one_copy_per_matching_subscription_each_with_its_identifier() -> None:
    broker = MemoryBroker()
    s, inbox = connect(broker, "s")
    p, _ = connect(broker, "p")
    s.subscribe("x/#", sub_id=1)
    s.subscribe("+/y", sub_id=2)
    s.subscribe("x/y")  # no identifier
    p.publish("x/y", b"m", qos=1)
    assert sorted(d.subscription_ids for d in inbox.take()) == [(), (1,), (2,)]


def test_no_local_skips_only_that_subscription() -> None:
    broker = MemoryBroker()
    c, inbox = connect(broker, "c")
    c.subscribe("t/#", sub_id=1, no_local=True)
    c.subscribe("t/+", sub_id=2)
    c.publish("t/a", b"own", qos=1)
    assert [d.subscription_ids for d in inbox.take()] == [(2,)]
    other, _ = connect(broker, "o")
    other.publish("t/a", b"theirs", qos=1)
    assert sorted(d.subscription_ids for d in inbox.take()) == [(1,), (2,)]


def test_resubscribe_replaces_qos_and_id_but_keeps_first_options() -> None:
    broker = MemoryBroker()
    c, inbox = connect(broker, "c")
    p, _ = connect(broker, "p")
    c.subscribe("t", sub_id=1, qos=1, no_local=True)
    c.subscribe("t", sub_id=2, qos=0, no_local=False, retain_as_published=True)
    c.publish("t", b"own", qos=1, retain=True)
    assert inbox.take() == []  # No Local kept
    p.publish("t", b"x", qos=1, retain=True)
    assert inbox.take() == [Delivery("t", b"x", 0, False, (2,))]  # RAP kept off, QoS/id replaced
    assert c.unsubscribe("t") and not c.unsubscribe("t")
    p.publish("t", b"y", qos=1)
    assert inbox.take() == []


def test_broker_without_subscription_identifiers() -> None:
    broker = MemoryBroker(subscription_identifiers=False)
    c, inbox = connect(broker, "c")
    assert c.connack.subscription_identifier_available is False
    with pytest.raises(ProtocolError):
        c.subscribe("t", sub_id=1)
    c.subscribe("t")
    c.publish("t", b"x")
    assert inbox.take() == [Delivery("t", b"x", 0, False, ())]
    with pytest.raises(ProtocolError):
        MemoryBroker().connect("d", deliver=lambda d: None).subscribe("t", sub_id=0)


# -- retained messages ----------------------------------------------------------------------------


def test_retained_messages() -> None:
    broker = MemoryBroker()
    p, _ = connect(broker, "p")
    p.publish("r/a", b"1", qos=1, retain=True)
    p.publish("r/b", b"2", qos=0, retain=True)
    p.publish("r/a", b"3", qos=1, retain=True)  # replaces
    assert broker.retained() == {"r/a": b"3", "r/b": b"2"}
    s, inbox = connect(broker, "s")
    s.subscribe("r/#", sub_id=5, qos=1)
    got = sorted(inbox.take(), key=lambda d: d.topic)
    assert [(d.topic, d.payload, d.qos, d.retain, d.subscription_ids) for d in got] == [
        ("r/a", b"3", 1, True, (5,)), ("r/b", b"2", 0, True, (5,))]
    p.publish("r/a", b"live", qos=1, retain=True)
    assert [(d.payload, d.retain) for d in inbox.take()] == [(b"live", False)]
    p.publish("r/a", b"", qos=1, retain=True)  # clears, and is forwarded
    assert [(d.payload, d.retain) for d in inbox.take()] == [(b"", False)]
    assert broker.retained() == {"r/b": b"2"}
    s.subscribe("r/#", sub_id=6)  # subscribing again sends the retained ones again
    assert [(d.topic, d.subscription_ids) for d in inbox.take()] == [("r/b", (6,))]


def test_retain_as_published() -> None:
    broker = MemoryBroker()
    s, inbox = connect(broker, "s")
    s.subscribe("t", retain_as_published=True)
    s.publish("t", b"x", qos=1, retain=True)
    s.publish("t", b"y", qos=1)
    assert [(d.payload, d.retain) for d in inbox.take()] == [(b"x", True), (b"y", False)]


# -- sessions -----------------------------------------------------------------------------------


def test_session_keeps_subscriptions_and_queues_qos1_while_away() -> None:
    broker = MemoryBroker()
    p, _ = connect(broker, "p")
    s, inbox = connect(broker, "s", clean_start=False, session_expiry=60)
    assert s.connack.session_present is False
    s.subscribe("t/#", sub_id=3)
    s.drop()
    assert s.closed and s.close_reason is CloseReason.DROPPED
    with pytest.raises(ConnectionClosed):
        s.publish("t/x", b"late")
    p.publish("t/1", b"q1", qos=1)
    p.publish("t/1", b"q0", qos=0)  # not queued for an absent client
    p.publish("t/1", b"q2", qos=1)
    assert inbox.take() == []
    s2, inbox2 = connect(broker, "s", clean_start=False, session_expiry=60)
    assert s2.connack.session_present is True
    assert inbox2.payloads() == [b"q1", b"q2"]
    p.publish("t/1", b"live", qos=1)
    assert inbox2.payloads() == [b"live"]


def test_unacknowledged_messages_are_sent_again_first_in_order() -> None:
    broker = MemoryBroker()
    p, _ = connect(broker, "p")
    s, inbox = connect(broker, "s", ack=False, clean_start=False, session_expiry=60)
    s.subscribe("t")
    for i in range(4):
        p.publish("t", b"%d" % i, qos=1)
    first = inbox.take()
    assert [(d.packet_id, d.dup) for d in first] == [(1, False), (2, False), (3, False), (4, False)]
    s.puback(2)
    s.drop()
    p.publish("t", b"4", qos=1)
    s2, inbox2 = connect(broker, "s", ack=False, clean_start=False, session_expiry=60)
    got = inbox2.take()
    assert [(d.payload, d.packet_id, d.dup) for d in got] == [
        (b"0", 1, True), (b"2", 3, True), (b"3", 4, True), (b"4", 5, False)]


def test_clean_start_discards_the_session() -> None:
    broker = MemoryBroker()
    p, _ = connect(broker, "p")
    s, _ = connect(broker, "s", clean_start=False, session_expiry=60)
    s.subscribe("t")
    s.drop()
    p.publish("t", b"x", qos=1)
    s2, inbox = connect(broker, "s", clean_start=True, session_expiry=60)
    assert s2.connack.session_present is False
    p.publish("t", b"y", qos=1)
    assert inbox.take() == []


def test_session_expiry_follows_the_clock() -> None:
    broker = MemoryBroker()
    s, _ = connect(broker, "s", clean_start=False, session_expiry=30)
    n, _ = connect(broker, "n", clean_start=False, session_expiry=NEVER_EXPIRES)
    z, _ = connect(broker, "z")
    assert broker.next_deadline() is None  # connected sessions do not expire
    broker.advance(100)
    s.drop()
    n.drop()
    z.drop()
    assert not broker.has_session("z")  # expiry 0: gone with the connection
    assert broker.next_deadline() == 130
    broker.advance(129.5)
    assert broker.has_session("s")
    broker.advance(130)
    assert not broker.has_session("s") and broker.has_session("n")
    assert broker.next_deadline() is None
    with pytest.raises(ValueError, match="forward"):
        broker.advance(1)
    s2, _ = connect(broker, "s", clean_start=False, session_expiry=30)
    assert s2.connack.session_present is False


def test_reconnect_before_expiry_cancels_it() -> None:
    broker = MemoryBroker()
    s, _ = connect(broker, "s", clean_start=False, session_expiry=10)
    s.drop()
    broker.advance(5)
    s2, _ = connect(broker, "s", clean_start=False, session_expiry=10)
    broker.advance(50)
    assert broker.has_session("s") and s2.connack.session_present


def test_disconnect_may_end_or_extend_the_session() -> None:
    broker = MemoryBroker()
    s, _ = connect(broker, "s", clean_start=False, session_expiry=10)
    s.disconnect(session_expiry=0)
    assert not broker.has_session("s")
    s, _ = connect(broker, "s", clean_start=False, session_expiry=10)
    s.disconnect(session_expiry=NEVER_EXPIRES)
    broker.advance(1e9)
    assert broker.has_session("s")
    z, _ = connect(broker, "z", session_expiry=0)
    with pytest.raises(ProtocolError):
        z.disconnect(session_expiry=5)
    assert not z.closed


def test_receive_maximum_holds_deliveries_back_in_order() -> None:
    broker = MemoryBroker()
    p, _ = connect(broker, "p")
    s, inbox = connect(broker, "s", ack=False, receive_maximum=2)
    s.subscribe("t")
    for i in range(5):
        p.publish("t", b"%d" % i, qos=1)
    p.publish("t", b"zero", qos=0)  # waits its turn behind the QoS 1 ones
    assert inbox.payloads() == [b"0", b"1"]
    s.puback(1)
    assert inbox.payloads() == [b"2"]
    s.puback(2)
    s.puback(3)
    assert inbox.payloads() == [b"3", b"4", b"zero"]


def test_packet_ids_wrap_and_skip_ids_in_flight() -> None:
    broker = MemoryBroker()
    p, _ = connect(broker, "p")
    s, inbox = connect(broker, "s", ack=False)
    s.subscribe("t")
    p.publish("t", b"held", qos=1)  # packet id 1 stays in flight
    for _ in range(65_534):
        p.publish("t", b"x", qos=1)
    got = inbox.take()
    for d in got[1:]:
        assert d.packet_id is not None
        s.puback(d.packet_id)
    p.publish("t", b"wrapped", qos=1)
    assert [d.packet_id for d in inbox.take()] == [2]


# -- takeover and will ------------------------------------------------------------------------------


def test_takeover_closes_the_old_connection() -> None:
    broker = MemoryBroker()
    w, wills = connect(broker, "w")
    w.subscribe("will")
    old, old_inbox = connect(broker, "c", clean_start=False, session_expiry=60, will=Will("will", b"old", 1))
    old.subscribe("t")
    new, inbox = connect(broker, "c", clean_start=False, session_expiry=60, will=Will("will", b"new", 1))
    assert old_inbox.closes == [CloseReason.TAKEN_OVER] and old.closed
    with pytest.raises(ConnectionClosed):
        old.publish("t", b"x")
    assert new.connack.session_present and not new.closed
    assert wills.take() == []  # the session continues: mosquitto discards the old will
    w.publish("t", b"to new", qos=1)
    assert inbox.payloads() == [b"to new"] and old_inbox.take() == []
    new.drop()
    assert wills.payloads() == [b"new"]


def test_takeover_with_clean_start_publishes_the_old_will() -> None:
    broker = MemoryBroker()
    w, wills = connect(broker, "w")
    w.subscribe("will")
    connect(broker, "c", clean_start=False, session_expiry=60, will=Will("will", b"old"))[0].subscribe("t")
    new, inbox = connect(broker, "c", clean_start=True, session_expiry=60)
    assert wills.payloads() == [b"old"]
    w.publish("t", b"x", qos=1)
    assert inbox.take() == []  # the old subscriptions went with the old session


def test_takeover_of_a_session_with_expiry_0_publishes_the_will() -> None:
    broker = MemoryBroker()
    w, wills = connect(broker, "w")
    w.subscribe("will")
    connect(broker, "c", session_expiry=0, will=Will("will", b"old"))
    new, _ = connect(broker, "c", clean_start=False, session_expiry=60)
    assert wills.payloads() == [b"old"] and new.connack.session_present is False


def test_will_on_drop_not_on_normal_disconnect() -> None:
    broker = MemoryBroker()
    w, wills = connect(broker, "w")
    w.subscribe("will/#")
    connect(broker, "a", will=Will("will/a", b"a"))[0].disconnect()
    connect(broker, "b", will=Will("will/b", b"b"))[0].disconnect(publish_will=True)
    connect(broker, "c", will=Will("will/c", b"c"))[0].drop()
    assert wills.payloads() == [b"b", b"c"]


def test_retained_empty_will_clears_presence() -> None:
    broker = MemoryBroker()
    c, _ = connect(broker, "c", will=Will("presence/c", b"", qos=1, retain=True))
    c.publish("presence/c", b"hello", qos=1, retain=True)
    assert broker.retained() == {"presence/c": b"hello"}
    c.drop()
    assert broker.retained() == {}


# -- order, reentrancy, limits ------------------------------------------------------------------


def test_order_per_publisher_holds_across_a_reconnect() -> None:
    broker = MemoryBroker()
    p, _ = connect(broker, "p")
    s, inbox = connect(broker, "s", ack=False, clean_start=False, session_expiry=60)
    s.subscribe("t/#")
    seen: list[bytes] = []
    for i in range(100):
        p.publish(f"t/{i % 3}", b"%d" % i, qos=1)
        if i == 40:
            seen += inbox.payloads()
            s.drop()
        if i == 70:
            s, inbox = connect(broker, "s", ack=True, clean_start=False, session_expiry=60)
    seen += inbox.payloads()
    assert seen[:41] == [b"%d" % i for i in range(41)]
    assert seen[41:] == [b"%d" % i for i in range(41)] + [b"%d" % i for i in range(41, 100)]


def test_callbacks_may_call_the_broker() -> None:
    """A deliver callback that publishes: its messages queue behind those already due, in order."""
    broker = MemoryBroker()
    log: list[tuple[str, bytes]] = []
    handles: dict[str, ClientHandle] = {}

    def echo(d: Delivery) -> None:
        log.append(("echo", d.payload))
        if d.topic == "ping":
            handles["echo"].publish("pong", d.payload, qos=1)

    handles["echo"] = broker.connect("echo", deliver=echo)
    handles["echo"].subscribe("ping", qos=0)
    handles["obs"] = broker.connect("obs", deliver=lambda d: log.append(("obs", d.payload)))
    handles["obs"].subscribe("#", qos=0)
    handles["obs"].publish("ping", b"1")
    assert log == [("echo", b"1"), ("obs", b"1"), ("obs", b"1")]  # the pong reaches obs last


def test_a_raising_callback_delays_the_others_to_the_next_call() -> None:
    broker = MemoryBroker()

    def boom(d: Delivery) -> None:
        raise RuntimeError("subscriber bug")

    broker.connect("bad", deliver=boom).subscribe("t", qos=0)
    ok, inbox = connect(broker, "ok")
    ok.subscribe("t", qos=0)
    with pytest.raises(RuntimeError):
        ok.publish("t", b"1")
    assert inbox.take() == []
    ok.subscribe("other")
    assert inbox.payloads() == [b"1"]


def test_closed_callback_only_when_the_broker_closes() -> None:
    broker = MemoryBroker()
    a, inbox_a = connect(broker, "a")
    a.drop()
    b, inbox_b = connect(broker, "b")
    b.disconnect()
    assert inbox_a.closes == [] and inbox_b.closes == [] and a.close_reason is CloseReason.DROPPED
    assert b.close_reason is CloseReason.NORMAL
    for op in (b.drop, b.disconnect, lambda: b.subscribe("t"), lambda: b.unsubscribe("t"), lambda: b.puback(1)):
        with pytest.raises(ConnectionClosed):
            op()


def test_packet_too_large_closes_the_connection_and_fires_the_will() -> None:
    broker = MemoryBroker(max_packet_size=100)
    w, wills = connect(broker, "w")
    w.subscribe("will")
    c, inbox = connect(broker, "c", will=Will("will", b"gone"))
    assert c.connack == ConnAck(session_present=False, maximum_packet_size=100,
                                subscription_identifier_available=True)
    limit = 100 - publish_packet_size("t", b"", 1)
    c.publish("t", b"x" * limit, qos=1)
    with pytest.raises(PacketTooLarge):
        c.publish("t", b"x" * (limit + 1), qos=1)
    assert c.close_reason is CloseReason.PACKET_TOO_LARGE and inbox.closes == [CloseReason.PACKET_TOO_LARGE]
    assert wills.payloads() == [b"gone"]


def test_publish_packet_size() -> None:
    # fixed header 1 + remaining-length 1 + topic 2+1 + packet id 2 + properties length 1 + payload 3
    assert publish_packet_size("t", b"abc", 1) == 11
    assert publish_packet_size("t", b"abc", 0) == 9
    assert publish_packet_size("t", b"x" * 200, 0) == 1 + 2 + 3 + 1 + 200


def test_empty_client_id_gets_one_assigned() -> None:
    broker = MemoryBroker()
    a = broker.connect("", deliver=lambda d: None)
    b = broker.connect("", deliver=lambda d: None)
    assert a.client_id and b.client_id and a.client_id != b.client_id and not a.closed


# == the same scenarios on both brokers ============================================================


class Client(Protocol):
    session_present: bool

    def subscribe(self, f: str, *, sub_id: int | None = None, qos: int = 1, no_local: bool = False,
                  rap: bool = False) -> None: ...
    def publish(self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False) -> None: ...
    def messages(self, n: int = 0) -> list[Delivery]: ...
    def ack(self, packet_id: int) -> None: ...
    def drop(self) -> None: ...
    def disconnect(self, *, session_expiry: int | None = None, publish_will: bool = False) -> None: ...
    def closed_by_broker(self) -> bool: ...


class MemClient:
    def __init__(self, broker: MemoryBroker, cid: str, *, manual_ack: bool, **kw: Any) -> None:
        self.handle, self.inbox = connect(broker, cid, ack=not manual_ack, **kw)
        self.session_present = self.handle.connack.session_present

    def subscribe(self, f: str, *, sub_id: int | None = None, qos: int = 1, no_local: bool = False,
                  rap: bool = False) -> None:
        self.handle.subscribe(f, sub_id=sub_id, qos=qos, no_local=no_local, retain_as_published=rap)

    def publish(self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False) -> None:
        self.handle.publish(topic, payload, qos=qos, retain=retain)

    def messages(self, n: int = 0) -> list[Delivery]:
        return self.inbox.take()

    def ack(self, packet_id: int) -> None:
        self.handle.puback(packet_id)

    def drop(self) -> None:
        self.handle.drop()

    def disconnect(self, *, session_expiry: int | None = None, publish_will: bool = False) -> None:
        self.handle.disconnect(session_expiry=session_expiry, publish_will=publish_will)

    def closed_by_broker(self) -> bool:
        return len(self.inbox.closes) == 1


class PahoClient:
    """A paho-mqtt MQTT 5 client driven synchronously (its network loop runs in a thread)."""

    SETTLE = 0.4  # how long to wait for messages that should not come

    def __init__(self, b: EmbeddedBroker, cid: str, *, manual_ack: bool, clean_start: bool = True,
                 session_expiry: int = 0, will: Will | None = None) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        self._q: queue.Queue[Delivery] = queue.Queue()
        self._connack: queue.Queue[Any] = queue.Queue()
        self._gone: queue.Queue[Any] = queue.Queue()
        c = self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=mqtt.MQTTv5)
        c.reconnect_delay_set(3600, 3600)  # a taken-over client must not take the session back
        c.manual_ack_set(manual_ack)
        if will is not None:
            c.will_set(will.topic, will.payload, will.qos, will.retain)
        c.on_message = self._on_message
        c.on_connect = lambda c, u, flags, rc, p: self._connack.put(flags)
        c.on_disconnect = lambda c, u, f, rc, p: self._gone.put(rc)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = session_expiry
        c.connect(b.host, b.port, clean_start=clean_start, properties=props)
        c.loop_start()
        self.session_present = bool(self._connack.get(timeout=10).session_present)

    def _on_message(self, c: Any, u: Any, m: Any) -> None:
        ids = getattr(m.properties, "SubscriptionIdentifier", None) or []
        self._q.put(Delivery(m.topic, m.payload, m.qos, bool(m.retain), tuple(ids), m.mid if m.qos else None,
                             bool(m.dup)))

    def subscribe(self, f: str, *, sub_id: int | None = None, qos: int = 1, no_local: bool = False,
                  rap: bool = False) -> None:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties
        from paho.mqtt.subscribeoptions import SubscribeOptions

        props = None
        if sub_id is not None:
            props = Properties(PacketTypes.SUBSCRIBE)
            props.SubscriptionIdentifier = sub_id
        done: queue.Queue[Any] = queue.Queue()
        self.c.on_subscribe = lambda *a: done.put(a)
        self.c.subscribe(f, options=SubscribeOptions(qos=qos, noLocal=no_local, retainAsPublished=rap),
                         properties=props)
        done.get(timeout=10)

    def publish(self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False) -> None:
        self.c.publish(topic, payload, qos, retain).wait_for_publish(10)

    def messages(self, n: int = 0) -> list[Delivery]:
        """The next ``n`` messages, plus any that arrive within SETTLE after them."""
        out: list[Delivery] = []
        deadline = time.monotonic() + 10
        while len(out) < n:
            out.append(self._q.get(timeout=max(0.01, deadline - time.monotonic())))
        time.sleep(self.SETTLE)
        while not self._q.empty():
            out.append(self._q.get())
        return out

    def ack(self, packet_id: int) -> None:
        self.c.ack(packet_id, 1)

    def drop(self) -> None:
        self.c.loop_stop()
        sock = self.c.socket()
        if sock is not None:
            sock.close()

    def disconnect(self, *, session_expiry: int | None = None, publish_will: bool = False) -> None:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties
        from paho.mqtt.reasoncodes import ReasonCode

        props = None
        if session_expiry is not None:
            props = Properties(PacketTypes.DISCONNECT)
            props.SessionExpiryInterval = session_expiry
        reason = ReasonCode(PacketTypes.DISCONNECT, identifier=4 if publish_will else 0)
        self.c.disconnect(reasoncode=reason, properties=props)
        self._gone.get(timeout=10)
        self.c.loop_stop()

    def closed_by_broker(self) -> bool:
        try:
            self._gone.get(timeout=10)
        except queue.Empty:
            return False
        return True


class World:
    """Connects clients with test-unique ids to one broker, memory or mosquitto."""

    def __init__(self, kind: str, ns: str, broker: EmbeddedBroker | None, *, max_packet_size: int = 16 << 20) -> None:
        self.kind, self.ns, self.mosquitto = kind, ns, broker
        self.memory = MemoryBroker(max_packet_size=max_packet_size)
        self.paho: list[PahoClient] = []

    @property
    def max_packet_size(self) -> int:
        return self.mosquitto.max_packet_size if self.mosquitto else self.memory.max_packet_size

    def connect(self, name: str, *, manual_ack: bool = False, **kw: Any) -> Client:
        cid = f"{self.ns}-{name}"
        if self.mosquitto is None:
            return MemClient(self.memory, cid, manual_ack=manual_ack, **kw)
        client = PahoClient(self.mosquitto, cid, manual_ack=manual_ack, **kw)
        self.paho.append(client)
        return client

    def t(self, topic: str) -> str:
        return f"{self.ns}/{topic}"

    def close(self) -> None:
        for client in self.paho:
            try:
                client.c.disconnect()
            finally:
                client.c.loop_stop()


@pytest.fixture(params=["memory", pytest.param("mosquitto", marks=pytest.mark.mosquitto)])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    ns = "m" + uuid.uuid4().hex[:10]
    broker = request.getfixturevalue("broker") if request.param == "mosquitto" else None
    w = World(request.param, ns, broker)
    yield w
    w.close()


def _view(ds: list[Delivery]) -> list[tuple[str, bytes, int, bool, tuple[int, ...]]]:
    return sorted((d.topic, d.payload, d.qos, d.retain, d.subscription_ids) for d in ds)


def test_both_connack(world: World) -> None:
    a = world.connect("a", clean_start=False, session_expiry=60)
    assert a.session_present is False
    a.disconnect()
    b = world.connect("a", clean_start=False, session_expiry=60)
    assert b.session_present is True
    b.disconnect(session_expiry=0)
    if world.mosquitto is None:
        assert isinstance(b, MemClient)
        ack = b.handle.connack
        assert ack.maximum_packet_size == world.max_packet_size and ack.subscription_identifier_available


def test_both_wildcards_and_dollar_topics(world: World) -> None:
    ns = world.ns
    s = world.connect("s")
    s.subscribe(f"+/{ns}/#", sub_id=1)
    s.subscribe(f"${ns}/+", sub_id=2)
    s.subscribe(f"x/{ns}/+/c", sub_id=3)
    p = world.connect("p")
    p.publish(f"${ns}/t", b"dollar")
    p.publish(f"x/{ns}", b"parent")
    p.publish(f"x/{ns}/b/c", b"deep")
    assert _view(s.messages(4)) == [
        (f"${ns}/t", b"dollar", 1, False, (2,)),
        (f"x/{ns}", b"parent", 1, False, (1,)),
        (f"x/{ns}/b/c", b"deep", 1, False, (1,)),
        (f"x/{ns}/b/c", b"deep", 1, False, (3,)),
    ]


def test_both_subscription_ids_no_local_and_qos(world: World) -> None:
    s = world.connect("s")
    s.subscribe(world.t("x/#"), sub_id=1)
    s.subscribe(world.t("+/y"), sub_id=2, qos=0)
    s.subscribe(world.t("x/y"), sub_id=3, no_local=True)
    s.publish(world.t("x/y"), b"own")
    assert _view(s.messages(2)) == [(world.t("x/y"), b"own", 0, False, (2,)),
                                    (world.t("x/y"), b"own", 1, False, (1,))]
    p = world.connect("p")
    p.publish(world.t("x/y"), b"other")
    assert _view(s.messages(3)) == [(world.t("x/y"), b"other", 0, False, (2,)),
                                    (world.t("x/y"), b"other", 1, False, (1,)),
                                    (world.t("x/y"), b"other", 1, False, (3,))]


def test_both_retain_flag(world: World) -> None:
    p = world.connect("p")
    p.publish(world.t("r"), b"old", retain=True)
    s = world.connect("s")
    s.subscribe(world.t("r"), sub_id=1)
    s.subscribe(world.t("rap/#"), sub_id=2, rap=True)
    assert _view(s.messages(1)) == [(world.t("r"), b"old", 1, True, (1,))]
    p.publish(world.t("r"), b"new", retain=True)
    p.publish(world.t("rap/1"), b"kept", retain=True)
    assert _view(s.messages(2)) == [(world.t("r"), b"new", 1, False, (1,)),
                                    (world.t("rap/1"), b"kept", 1, True, (2,))]
    p.publish(world.t("r"), b"", retain=True)
    assert _view(s.messages(1)) == [(world.t("r"), b"", 1, False, (1,))]
    s.subscribe(world.t("r"), sub_id=3, qos=0)  # again: nothing retained any more
    s.subscribe(world.t("rap/#"), sub_id=4, qos=0, rap=False)  # again: RAP kept, QoS and id replaced
    assert _view(s.messages(1)) == [(world.t("rap/1"), b"kept", 0, True, (4,))]
    p.publish(world.t("rap/1"), b"live", retain=True)
    assert _view(s.messages(1)) == [(world.t("rap/1"), b"live", 0, True, (4,))]
    p.publish(world.t("rap/1"), b"", retain=True)
    s.messages(1)


def test_both_session_queue_and_redelivery(world: World) -> None:
    p = world.connect("p")
    s = world.connect("s", manual_ack=True, clean_start=False, session_expiry=60)
    s.subscribe(world.t("r/#"), sub_id=11)
    for i in range(3):
        p.publish(world.t("r/a"), b"r%d" % i)
    p.publish(world.t("r/a"), b"q0", qos=0)
    first = s.messages(4)
    assert [(d.payload, d.dup) for d in first] == [(b"r0", False), (b"r1", False), (b"r2", False), (b"q0", False)]
    assert first[0].packet_id is not None
    s.ack(first[0].packet_id)
    time.sleep(0.2 if world.mosquitto else 0)
    s.drop()
    p.publish(world.t("r/a"), b"r3")
    p.publish(world.t("r/a"), b"q0 away", qos=0)
    p.publish(world.t("r/a"), b"r4")
    s2 = world.connect("s", clean_start=False, session_expiry=60)
    assert s2.session_present
    got = s2.messages(4)
    assert [(d.payload, d.dup, d.subscription_ids) for d in got] == [
        (b"r1", True, (11,)), (b"r2", True, (11,)), (b"r3", False, (11,)), (b"r4", False, (11,))]
    assert [d.packet_id for d in got[:2]] == [d.packet_id for d in first[1:3]]
    s2.disconnect(session_expiry=0)
    p.publish(world.t("r/a"), b"after the end")
    s3 = world.connect("s", clean_start=False, session_expiry=60)
    assert not s3.session_present and s3.messages() == []
    s3.disconnect(session_expiry=0)


def test_both_takeover_continuing_the_session(world: World) -> None:
    w = world.connect("w")
    w.subscribe(world.t("will/#"), sub_id=9)
    old = world.connect("o", clean_start=False, session_expiry=60, will=Will(world.t("will/1"), b"o1", 1))
    old.subscribe(world.t("z"), sub_id=7)
    new = world.connect("o", clean_start=False, session_expiry=60, will=Will(world.t("will/1"), b"o2", 1))
    assert new.session_present and old.closed_by_broker()
    w.publish(world.t("z"), b"z1")
    assert _view(new.messages(1)) == [(world.t("z"), b"z1", 1, False, (7,))]
    assert w.messages() == []  # the old will is discarded
    new.drop()
    assert _view(w.messages(1)) == [(world.t("will/1"), b"o2", 1, False, (9,))]
    world.connect("o", clean_start=True).disconnect()


def test_both_takeover_with_clean_start_or_expiry_0_publishes_the_will(world: World) -> None:
    w = world.connect("w")
    w.subscribe(world.t("will/#"), sub_id=9)
    old = world.connect("o", clean_start=False, session_expiry=60, will=Will(world.t("will/1"), b"o1", 1))
    old.subscribe(world.t("z"))
    new = world.connect("o", clean_start=True, session_expiry=0)
    assert not new.session_present and old.closed_by_broker()
    assert _view(w.messages(1)) == [(world.t("will/1"), b"o1", 1, False, (9,))]
    w.publish(world.t("z"), b"lost")
    assert new.messages() == []
    e = world.connect("e", clean_start=True, session_expiry=0, will=Will(world.t("will/2"), b"e1", 1))
    e2 = world.connect("e", clean_start=False, session_expiry=0)
    assert not e2.session_present and e.closed_by_broker()
    assert _view(w.messages(1)) == [(world.t("will/2"), b"e1", 1, False, (9,))]


def test_both_will_on_drop_and_disconnect(world: World) -> None:
    w = world.connect("w")
    w.subscribe(world.t("will/#"))
    world.connect("a", will=Will(world.t("will/a"), b"a", 1)).disconnect()
    world.connect("b", will=Will(world.t("will/b"), b"b", 1)).disconnect(publish_will=True)
    world.connect("c", will=Will(world.t("will/c"), b"c", 1)).drop()
    assert sorted(d.payload for d in w.messages(2)) == [b"b", b"c"]


def test_both_order_per_publisher(world: World) -> None:
    s = world.connect("s")
    s.subscribe(world.t("o/#"))
    p = world.connect("p")
    for i in range(50):
        p.publish(world.t(f"o/{i % 4}"), b"%d" % i, qos=i % 2)
    assert [d.payload for d in s.messages(50)] == [b"%d" % i for i in range(50)]


@pytest.mark.parametrize("kind", ["memory", pytest.param("mosquitto", marks=pytest.mark.mosquitto)])
def test_both_packet_too_large(kind: str) -> None:
    """At the limit a PUBLISH passes; well over it the broker closes the connection and the will fires.

    (mosquitto 2.0 compares remaining length + 1 with the limit, so it lets through packets up to
    the length of the remaining-length field over it; the memory broker holds to MQTT's total size.)
    """
    ns = "m" + uuid.uuid4().hex[:10]
    with EmbeddedBroker(max_packet_size=1000) if kind == "mosquitto" else _no_broker() as mosquitto:
        world = World(kind, ns, mosquitto, max_packet_size=1000)
        try:
            w = world.connect("w")
            w.subscribe(world.t("will"))
            c = world.connect("c", will=Will(world.t("will"), b"gone", 1))
            c.subscribe(world.t("big"))
            fits = max(n for n in range(1000) if publish_packet_size(world.t("big"), b"x" * n, 1) <= 1000)
            c.publish(world.t("big"), b"x" * fits)
            assert [len(d.payload) for d in c.messages(1)] == [fits]
            if isinstance(c, MemClient):
                with pytest.raises(PacketTooLarge):
                    c.publish(world.t("big"), b"x" * (fits + 10))
            else:
                assert isinstance(c, PahoClient)
                c.c.publish(world.t("big"), b"x" * (fits + 10), 1)
            assert c.closed_by_broker()
            assert [d.payload for d in w.messages(1)] == [b"gone"]
        finally:
            world.close()


@contextmanager
def _no_broker() -> Iterator[None]:
    yield None
