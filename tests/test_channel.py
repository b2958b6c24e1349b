"""Tier-1 tests of broker_mqtt.channel: producer and consumers wired in memory, simulated time.

``Net`` is a lossy in-memory network (seeded ``random.Random``): it drops, duplicates and delays
(hence reorders) every message independently, and round-trips each one through ``to_wire`` and
CBOR so the wire format is exercised too. ``Sim`` drives the objects event by event: it jumps to
the earliest of the next delivery, the next deadline or the next scripted action.
"""

from __future__ import annotations

import heapq
import itertools
import os
import random
from dataclasses import dataclass, field
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_mqtt import channel as ch
from broker_mqtt.channel import (
    ChannelConfig,
    ChannelDecodeError,
    ChannelProtocolError,
    ChannelUsageError,
    Connected,
    Consumer,
    ConsumerLost,
    ConsumerState,
    CumulativeAck,
    Delivered,
    Event,
    EventBatch,
    EventsLost,
    Handshake,
    HandshakeCompleted,
    Heartbeat,
    LossReason,
    Nack,
    PathState,
    Producer,
    ProducerLost,
    RetransmitFailed,
    UnknownConsumer,
    decode_message,
)

PRODUCER = "P"


@dataclass
class Net:
    rng: random.Random
    loss: float = 0.0
    dup: float = 0.0
    max_delay: float = 0.0
    min_delay: float = 0.001
    queue: list[tuple[float, int, str, Any]] = field(default_factory=list)
    counter: itertools.count = field(default_factory=itertools.count)
    down: set[str] = field(default_factory=set)  # nodes that neither send nor receive

    def send(self, now: float, src: str, dst: str, msg: Any) -> None:
        if src in self.down or dst in self.down:
            return
        copies = 0 if self.rng.random() < self.loss else 1
        if copies and self.rng.random() < self.dup:
            copies = 2
        wire = cbor2.dumps(msg.to_wire())
        for _ in range(copies):
            at = now + self.min_delay + self.rng.random() * self.max_delay
            heapq.heappush(self.queue, (at, next(self.counter), dst, wire))

    def next_time(self) -> float:
        return self.queue[0][0] if self.queue else float("inf")

    def pop_due(self, now: float) -> list[tuple[str, Any]]:
        out = []
        while self.queue and self.queue[0][0] <= now:
            _, _, dst, wire = heapq.heappop(self.queue)
            if dst not in self.down:
                out.append((dst, decode_message(cbor2.loads(wire))))
        return out


class Sim:
    def __init__(self, net: Net, config: ChannelConfig, *, now: float = 0.0, batch: int = 1) -> None:
        self.net = net
        self.batch = batch  # Producer.to_send(batch=...): runs of events as EventBatch messages
        self.config = config
        self.now = now
        self.producer = Producer(PRODUCER, now, config=config)
        self.consumers: dict[str, Consumer] = {}
        self.delivered: dict[str, list[Any]] = {}
        self.events: dict[str, list[Any]] = {}
        self.producer_events: list[Any] = []
        self.script: list[tuple[float, int, Any]] = []
        self._n = itertools.count()

    def add_consumer(self, cid: str) -> None:
        self.consumers[cid] = Consumer(cid, PRODUCER, self.now, config=self.config)
        self.delivered[cid] = []
        self.events[cid] = []
        self.producer.add_consumer(cid, self.now)
        self.flush()

    def at(self, when: float, action: Any) -> None:
        heapq.heappush(self.script, (when, next(self._n), action))

    def flush(self) -> None:
        for out in self.producer.to_send(batch=self.batch):
            targets = [out.to] if out.to is not None else list(self.consumers)
            for cid in targets:
                self.net.send(self.now, PRODUCER, cid, out.message)
        for cid, consumer in self.consumers.items():
            for msg in consumer.to_send():
                self.net.send(self.now, cid, PRODUCER, msg)

    def _record(self, cid: str, events: list[Any]) -> None:
        self.events[cid].extend(events)
        self.delivered[cid].extend(e.payload for e in events if isinstance(e, Delivered))

    def step(self) -> None:
        live = [c for cid, c in self.consumers.items() if cid not in self.net.down]
        deadlines = [self.net.next_time(), self.script[0][0] if self.script else float("inf")]
        if PRODUCER not in self.net.down:
            deadlines.append(self.producer.next_deadline)
        deadlines.extend(c.next_deadline for c in live)
        self.now = max(self.now, min(deadlines))
        while self.script and self.script[0][0] <= self.now:
            heapq.heappop(self.script)[2](self)
        for dst, msg in self.net.pop_due(self.now):
            if dst == PRODUCER:
                self.producer_events.extend(self.producer.handle(msg, self.now))
            else:
                self._record(dst, self.consumers[dst].handle(msg, self.now))
        if PRODUCER not in self.net.down and self.producer.next_deadline <= self.now:
            self.producer_events.extend(self.producer.tick(self.now))
        for cid, consumer in self.consumers.items():
            if cid not in self.net.down and consumer.next_deadline <= self.now:
                self._record(cid, consumer.tick(self.now))
        self.flush()

    def run_until(self, until: float) -> None:
        while self.now < until:
            self.step()

    def run_until_idle(self, limit: float) -> None:
        while not (self.producer.idle and all(c.idle for c in self.consumers.values())
                   and not self.script):
            assert self.now < limit, f"not idle by t={limit}"
            self.step()


def produce(payload: Any):
    def action(sim: Sim) -> None:
        sim.producer.produce(payload, sim.now)

    return action


# -- wire format -------------------------------------------------------------------------------

MESSAGES = [
    Handshake("P", "C", 7, 0.5, {"snap": [1, 2]}),
    Handshake("P", "C", 1, 1.0),
    Event("P", 3, ["put", "k", b"v"]),
    EventBatch("P", 4, (["put", "k", 1], None, {"a": 2})),
    RetransmitFailed("P", "C", 2, 9),
    Heartbeat("P", 0),
    CumulativeAck("C", "P", 12),
    Nack("C", "P", ((1, 3), (5, 5))),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_wire_round_trip(msg: Any) -> None:
    wire = cbor2.loads(cbor2.dumps(msg.to_wire()))
    assert decode_message(wire) == msg
    assert type(msg).from_wire(wire) == msg


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_wire_truncated(msg: Any) -> None:
    wire = msg.to_wire()
    for n in range(len(wire)):
        with pytest.raises(ChannelDecodeError):
            decode_message(wire[:n])


@pytest.mark.parametrize("wire", [
    None, 5, "event", [], ["nope"], [1], ["event", "P", 0, None], ["event", "P", True, None],
    ["event", 3, 1, None], ["heartbeat", "P", -1], ["retransmit_failed", "P", "C", 5, 4],
    ["nack", "C", "P", []], ["nack", "C", "P", [[3, 1]]], ["nack", "C", "P", [[1]]],
    ["nack", "C", "P", 7], ["handshake", "P", "C", 1, 0, None], ["handshake", "P", "C", 1, "x", None],
    ["cumulative_ack", "C", "P", 1, 2], ["events", "P", 1, []], ["events", "P", 0, [1]], ["events", "P", 1, 5],
    ["events", "P", 1, {"a": 1}], ["events", 1, 1, [1]], ["events", "P", False, [1]],
])
def test_wire_malformed(wire: Any) -> None:
    with pytest.raises(ChannelDecodeError):
        decode_message(wire)


def test_from_wire_checks_kind() -> None:
    with pytest.raises(ChannelDecodeError):
        Event.from_wire(Heartbeat("P", 1).to_wire())
    with pytest.raises(ChannelDecodeError):
        EventBatch.from_wire(Event("P", 1, None).to_wire())


def test_event_batch_stands_for_its_events() -> None:
    batch = EventBatch("P", 5, ("a", "b", "c"))
    assert batch.last_seq == 7
    assert batch.events() == [Event("P", 5, "a"), Event("P", 6, "b"), Event("P", 7, "c")]


def test_config_validation() -> None:
    assert ChannelConfig().timeout == 5.0
    for bad in ({"heartbeat_interval": 0}, {"ack_interval": -1}, {"connection_timeout": 1},
                {"buffer_size": 0}, {"max_nack_ranges": 0}):
        with pytest.raises(ValueError):
            ChannelConfig(**bad)


def test_public_api() -> None:
    assert all(hasattr(ch, name) for name in ch.__all__)
    assert "Producer" in ch.__all__ and "Consumer" in ch.__all__


# -- deterministic unit behaviour ----------------------------------------------------------------

def connect(config: ChannelConfig | None = None) -> tuple[Producer, Consumer]:
    p = Producer("P", 0.0, config=config)
    c = Consumer("C", "P", 0.0, config=config)
    p.add_consumer("C", 0.0)
    [out] = p.to_send()
    assert out.to == "C" and isinstance(out.message, Handshake) and out.message.first_seq == 1
    assert c.handle(out.message, 0.0) == [Connected(1, None)]
    [ack] = c.to_send()
    assert ack == CumulativeAck("C", "P", 0)
    assert p.handle(ack, 0.0) == [HandshakeCompleted("C")]
    assert p.consumers == {"C": PathState.CONNECTED}
    return p, c


def test_in_order_delivery_and_buffering() -> None:
    p, c = connect()
    for i in range(3):
        p.produce(f"x{i}", 0.1)
    events = [o.message for o in p.to_send()]
    assert [e.seq for e in events] == [1, 2, 3]
    assert c.handle(events[2], 0.2) == []
    assert c.to_send() == [Nack("C", "P", ((1, 2),))]
    assert not c.idle
    assert c.handle(events[0], 0.2) == [Delivered(1, "x0")]
    assert c.handle(events[0], 0.2) == []  # duplicate
    assert c.handle(events[1], 0.2) == [Delivered(2, "x1"), Delivered(3, "x2")]
    assert c.idle
    assert p.buffered == 3 and not p.idle
    p.handle(CumulativeAck("C", "P", 3), 0.3)
    assert p.buffered == 0 and p.idle


def test_to_send_batches_runs_of_events() -> None:
    p, c = connect()
    for i in range(5):
        p.produce(i, 0.1)
    p.tick(1.2)  # heartbeat after the run
    p.produce(5, 1.2)
    out = p.to_send(batch=3)
    assert [o.message for o in out] == [EventBatch("P", 1, (0, 1, 2)), EventBatch("P", 4, (3, 4)),
                                        Heartbeat("P", 5), Event("P", 6, 5)]
    assert all(o.to is None for o in out)
    events = [e for o in out for e in c.handle(o.message, 1.3)]
    assert [e.payload for e in events if isinstance(e, Delivered)] == [0, 1, 2, 3, 4, 5]
    assert p.buffered_payloads() == [0, 1, 2, 3, 4, 5] and p.buffered_payloads(4) == [4, 5]
    p.handle(CumulativeAck("C", "P", 6), 1.3)
    assert p.buffered == 0 and p.buffered_payloads() == []


def test_to_send_without_batch_gives_single_events() -> None:
    p, _ = connect()
    for i in range(3):
        p.produce(i, 0.1)
    assert [o.message for o in p.to_send()] == [Event("P", 1, 0), Event("P", 2, 1), Event("P", 3, 2)]


def test_batch_with_gap_duplicates_and_early_part() -> None:
    p, c = connect()
    for i in range(6):
        p.produce(i, 0.1)
    [first, second] = [o.message for o in p.to_send(batch=3)]
    assert c.handle(second, 0.2) == []  # early: held, the gap is NACKed
    assert c.to_send() == [Nack("C", "P", ((1, 3),))]
    assert c.handle(first, 0.2) == [Delivered(i + 1, i) for i in range(6)]
    assert c.handle(first, 0.3) == [] and c.handle(second, 0.3) == []  # duplicates
    overlapping = EventBatch("P", 5, (4, 5, 6))  # partly delivered already
    assert c.handle(overlapping, 0.3) == [Delivered(7, 6)]
    assert c.idle


def test_batched_retransmission() -> None:
    p, c = connect()
    for i in range(5):
        p.produce(i, 0.1)
    p.to_send()  # all lost
    p.handle(Nack("C", "P", ((2, 4),)), 0.2)
    assert [(o.message, o.to) for o in p.to_send(batch=8)] == [(EventBatch("P", 2, (1, 2, 3)), "C")]


def test_nack_triggers_unicast_retransmission() -> None:
    p, c = connect()
    for i in range(4):
        p.produce(i, 0.0)
    p.to_send()
    assert p.handle(Nack("C", "P", ((2, 3),)), 0.1) == []
    out = p.to_send()
    assert [(o.to, o.message.seq) for o in out] == [("C", 2), ("C", 3)]


def test_retransmit_failed_when_buffer_too_small() -> None:
    config = ChannelConfig(buffer_size=2)
    p, c = connect(config)
    for i in range(5):
        p.produce(i, 0.0)
    events = [o.message for o in p.to_send()]
    assert p.buffered == 2  # only seq 4 and 5 kept
    assert c.handle(events[4], 0.1) == []
    [nack] = c.to_send()
    assert nack == Nack("C", "P", ((1, 4),))
    p.handle(nack, 0.1)
    out = [o.message for o in p.to_send()]
    assert out == [RetransmitFailed("P", "C", 1, 3), events[3]]
    got = [e for m in out for e in c.handle(m, 0.2)]
    assert got == [EventsLost(1, 3), Delivered(4, 3), Delivered(5, 4)]
    assert c.idle


def test_retransmit_failed_keeps_held_events() -> None:
    p, c = connect(ChannelConfig(buffer_size=1))
    for i in range(5):
        p.produce(i, 0.0)
    events = [o.message for o in p.to_send()]
    c.handle(events[1], 0.0)  # holds 2, misses 1, 3, 4
    c.handle(events[4], 0.0)  # consumer buffer (size 1) is full: dropped
    assert c.handle(RetransmitFailed("P", "C", 1, 4), 0.1) == [
        EventsLost(1, 1), Delivered(2, 1), EventsLost(3, 4)]
    assert c.handle(events[4], 0.2) == [Delivered(5, 4)]


def test_heartbeat_when_idle_and_liveness_acks() -> None:
    p, c = connect()
    assert p.next_deadline == 1.0
    p.tick(1.0)
    assert [o.message for o in p.to_send()] == [Heartbeat("P", 0)]
    p.produce("a", 1.5)
    p.to_send()
    p.tick(2.0)
    assert p.to_send() == []  # broadcast at 1.5: no heartbeat due before 2.5
    assert c.next_deadline == 1.0
    c.tick(1.0)
    assert c.to_send() == [CumulativeAck("C", "P", 0)]  # idle consumers still ACK
    c.tick(1.5)
    assert c.to_send() == []


def test_heartbeat_reveals_lost_tail() -> None:
    p, c = connect()
    p.produce("lost", 0.1)
    p.to_send()  # dropped on the floor
    p.tick(1.1)
    [hb] = [o.message for o in p.to_send()]
    assert hb == Heartbeat("P", 1)
    c.handle(hb, 1.1)
    assert c.to_send() == [Nack("C", "P", ((1, 1),))]
    assert not c.idle


def test_dead_consumer_dropped_and_buffer_released() -> None:
    p, c = connect()
    p.produce("a", 0.0)
    assert p.buffered == 1
    assert p.tick(4.9) == []
    assert p.tick(5.0) == [ConsumerLost("C", LossReason.TIMEOUT)]
    assert p.consumers == {} and p.buffered == 0
    ack = CumulativeAck("C", "P", 1)
    assert p.handle(ack, 5.1) == [UnknownConsumer("C", ack)]


def test_dead_producer_detected() -> None:
    p, c = connect()
    assert c.tick(4.0) == []
    c.handle(Heartbeat("P", 0), 4.0)
    assert c.tick(8.9) == []
    assert c.tick(9.0) == [ProducerLost(4.0)]
    assert c.state is ConsumerState.CLOSED and c.next_deadline == float("inf")
    assert c.handle(Heartbeat("P", 0), 9.1) == []


def test_consumer_without_handshake_times_out() -> None:
    c = Consumer("C", "P", 0.0)
    assert c.tick(5.0) == [ProducerLost(0.0)]


def test_handshake_repeated_until_acked() -> None:
    p = Producer("P", 0.0)
    p.add_consumer("C", 0.0)
    p.to_send()
    p.tick(1.0)
    kinds = sorted(type(o.message).__name__ for o in p.to_send())
    assert kinds == ["Handshake", "Heartbeat"]
    assert not p.idle


def test_late_joiner_starts_at_current_sequence_with_greeting() -> None:
    p, c = connect()
    for i in range(3):
        p.produce(i, 0.0)
    p.to_send()
    assert p.add_consumer("D", 0.1, greeting={"snapshot": 3}) == 4
    [hs] = [o.message for o in p.to_send()]
    d = Consumer("D", "P", 0.1)
    early = Event("P", 4, "early")  # a broadcast overtaking the handshake is kept
    assert d.handle(early, 0.1) == []
    assert d.handle(hs, 0.2) == [Connected(4, {"snapshot": 3}), Delivered(4, "early")]


def test_readded_consumer_skips_ahead() -> None:
    p, c = connect()
    p.produce("a", 0.0)
    p.to_send()
    p.tick(5.0)  # C dropped
    p.produce("b", 5.0)
    p.add_consumer("C", 5.0)
    hs = p.to_send()[-1].message
    assert isinstance(hs, Handshake) and hs.first_seq == 3
    assert c.handle(hs, 5.1) == [EventsLost(1, 2), Connected(3, None)]
    assert c.to_send()[0] == CumulativeAck("C", "P", 2)


def test_ignores_other_parties() -> None:
    p, c = connect()
    assert c.handle(Event("Q", 1, "x"), 0.1) == []
    assert c.handle(RetransmitFailed("P", "D", 1, 1), 0.1) == []
    assert p.handle(CumulativeAck("C", "Q", 0), 0.1) == []


def test_protocol_and_usage_errors_leave_state_unchanged() -> None:
    p, c = connect()
    with pytest.raises(ChannelProtocolError):
        p.handle(CumulativeAck("C", "P", 1), 0.1)
    with pytest.raises(ChannelProtocolError):
        p.handle(Nack("C", "P", ((1, 1),)), 0.1)
    assert p.acked("C") == 0
    with pytest.raises(ChannelUsageError):
        p.tick(-1.0)
    with pytest.raises(ChannelUsageError):
        c.tick(-1.0)


def test_remove_consumer() -> None:
    p, c = connect()
    assert p.remove_consumer("C", 0.1) == [ConsumerLost("C", LossReason.REMOVED)]
    assert p.remove_consumer("C", 0.1) == []


def test_no_io_imports() -> None:
    import inspect

    source = inspect.getsource(ch)
    for banned in ("import anyio", "import trio", "import socket", "import time", "import asyncio"):
        assert banned not in source


# -- simulations ---------------------------------------------------------------------------------

LOSSY = ChannelConfig(heartbeat_interval=0.5, ack_interval=0.25, connection_timeout=40, buffer_size=4096)


def run_lossy(seed: int, n_events: int, n_consumers: int, gaps: list[float], *, loss: float = 0.2,
              dup: float = 0.1, max_delay: float = 0.3, late: bool = False, batch: int = 1) -> Sim:
    net = Net(random.Random(seed), loss=loss, dup=dup, max_delay=max_delay)
    sim = Sim(net, LOSSY, batch=batch)
    for i in range(n_consumers):
        sim.add_consumer(f"c{i}")
    t = 0.0
    for i in range(n_events):
        t += gaps[i % len(gaps)]
        sim.at(t, produce(i))
    if late:
        sim.at(t / 2, lambda s: s.add_consumer("late"))
    sim.run_until_idle(limit=t + 600)
    return sim


def check_exactly_once_in_order(sim: Sim, n_events: int) -> None:
    for cid, got in sim.delivered.items():
        assert not any(isinstance(e, (EventsLost, ProducerLost)) for e in sim.events[cid]), cid
        connected = [e for e in sim.events[cid] if isinstance(e, Connected)]
        assert len(connected) == 1
        first = connected[0].first_seq
        assert got == list(range(first - 1, n_events)), cid
    assert not any(isinstance(e, ConsumerLost) for e in sim.producer_events)
    assert sim.producer.buffered == 0


@settings(max_examples=int(os.environ.get("CHANNEL_EXAMPLES", 40)), deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       gaps=st.lists(st.sampled_from([0.0, 0.001, 0.05, 0.4, 2.0]), min_size=1, max_size=8),
       n_consumers=st.integers(1, 3), batch=st.sampled_from([1, 1, 4, 64]))
def test_exactly_once_in_order_under_loss_reorder_duplication(seed: int, gaps: list[float],
                                                               n_consumers: int, batch: int) -> None:
    sim = run_lossy(seed, 150, n_consumers, gaps, batch=batch)
    check_exactly_once_in_order(sim, 150)


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("seed", range(5))
def test_late_joiner_under_loss(seed: int, batch: int) -> None:
    sim = run_lossy(seed, 80, 2, [0.05, 0.3], late=True, batch=batch)
    check_exactly_once_in_order(sim, 80)
    first = next(e.first_seq for e in sim.events["late"] if isinstance(e, Connected))
    assert 1 < first <= 80


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("seed", range(5))
def test_small_buffer_reports_gaps_and_continues(seed: int, batch: int) -> None:
    config = ChannelConfig(heartbeat_interval=0.5, ack_interval=0.25, connection_timeout=40, buffer_size=3)
    net = Net(random.Random(seed), loss=0.3, dup=0.1, max_delay=0.2)
    sim = Sim(net, config, batch=batch)
    sim.add_consumer("c0")
    sim.run_until(0.1)
    for i in range(100):
        sim.at(0.1 + i * 0.001, produce(i))  # a burst far beyond the buffer
    sim.run_until_idle(limit=300)
    seen: list[int] = []
    for e in sim.events["c0"]:
        if isinstance(e, Delivered):
            seen.append(e.seq)
        elif isinstance(e, EventsLost):
            seen.extend(range(e.first, e.last + 1))
    assert seen == list(range(1, 101))  # every seq accounted for once, in order
    assert any(isinstance(e, EventsLost) for e in sim.events["c0"])
    assert [e.payload for e in sim.events["c0"] if isinstance(e, Delivered)] == \
        [e.seq - 1 for e in sim.events["c0"] if isinstance(e, Delivered)]


def test_idle_channel_keeps_connection_alive() -> None:
    sim = Sim(Net(random.Random(1)), ChannelConfig())
    sim.add_consumer("c0")
    sim.run_until(3600.0)  # an hour of silence
    assert sim.producer.consumers == {"c0": PathState.CONNECTED}
    assert sim.consumers["c0"].state is ConsumerState.CONNECTED
    assert not sim.producer_events[1:] and sim.events["c0"] == [Connected(1, None)]


def test_simulated_dead_consumer_and_dead_producer() -> None:
    sim = Sim(Net(random.Random(2)), ChannelConfig())
    sim.add_consumer("c0")
    sim.add_consumer("c1")
    sim.run_until(2.0)
    sim.net.down.add("c1")
    sim.run_until(10.0)
    assert ConsumerLost("c1", LossReason.TIMEOUT) in sim.producer_events
    assert list(sim.producer.consumers) == ["c0"]
    sim.net.down.add(PRODUCER)
    sim.run_until(20.0)
    assert any(isinstance(e, ProducerLost) for e in sim.events["c0"])
    assert sim.consumers["c0"].state is ConsumerState.CLOSED


# -- arbitrary inputs: invariants hold whatever the producer side sends --------------------------

producer_messages = st.one_of(
    st.builds(Handshake, st.just("P"), st.just("C"), st.integers(1, 30), st.just(1.0)),
    st.builds(Event, st.just("P"), st.integers(1, 30), st.integers()),
    st.builds(EventBatch, st.just("P"), st.integers(1, 30),
              st.lists(st.integers(), min_size=1, max_size=5).map(tuple)),
    st.builds(Heartbeat, st.just("P"), st.integers(0, 30)),
    st.integers(1, 30).flatmap(
        lambda a: st.integers(a, 30).map(lambda b: RetransmitFailed("P", "C", a, b))),
)


@settings(max_examples=int(os.environ.get("CHANNEL_EXAMPLES", 100)), deadline=None)
@given(st.lists(st.tuples(producer_messages, st.floats(0, 3)), max_size=60))
def test_consumer_invariants_under_arbitrary_input(steps: list[tuple[Any, float]]) -> None:
    c = Consumer("C", "P", 0.0, config=ChannelConfig(buffer_size=8))
    now, reported = 0.0, []
    for msg, dt in steps:
        now += dt
        events = c.handle(msg, now) + c.tick(now)
        for e in events:
            match e:
                case Delivered(seq=seq):
                    reported.append(seq)
                case EventsLost(first=first, last=last):
                    assert first <= last
                    reported.extend(range(first, last + 1))
        for out in c.to_send():
            if isinstance(out, Nack):
                assert all(c.next_seq <= a <= b for a, b in out.ranges)
        if c.state is ConsumerState.CONNECTED:
            assert len(c._buffer) <= 8
    assert reported == sorted(set(reported))  # each seq reported once, in increasing order
    if reported:
        assert reported == list(range(reported[0], reported[-1] + 1))  # and without holes
