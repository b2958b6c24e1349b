"""A fleet of simulated plain-MQTT devices: ordinary paho-mqtt 2.x clients, not broker_mqtt endpoints.

- :class:`JsonDevice`: publishes ``{"device": id, "seq": n, "temp": x}`` on ``<prefix>/<id>/telemetry``
  and subscribes ``<prefix>/<id>/cmd``, recording every command (parsed JSON, and how many times each
  distinct command arrived).
- :class:`EdgeNode`: a Sparkplug B edge node (``spBv1.0/<group>/...``) with devices: NDEATH as its
  will (with its bdSeq), NBIRTH (bdSeq and aliased node metrics), a DBIRTH per device (name, alias and
  datatype of each metric), then DDATA carrying aliases only; it subscribes its NCMD and DCMD topics and
  records the commands (metric names resolved from the aliases it gave, values read by datatype).

Every device is its own MQTT client (client id + TCP connection); one :class:`Fleet` drives all of its
clients from one thread with one ``selectors`` loop (paho clients pumped by hand: ``loop_read``,
``loop_write``, ``loop_misc``), so a thousand devices need no thousand threads. Either the fleet runs
in the caller's thread (``run_until``, what the bench's publisher processes do), or ``start()`` runs it
in one background thread and the other methods hand their work to that thread (what the tests do).

Split over OS processes (the bench): ``python tests/fleet.py --broker URL --prefix P --first 0
--devices 250 --messages 1000`` connects, prints ``READY``, waits for ``GO`` on stdin, publishes as
fast as it can (QoS 1: at most ``--window`` unacknowledged per device), waits until everything is
acknowledged (QoS 0: written to the socket) and prints a JSON summary. ``--edge-nodes`` adds Sparkplug
edge nodes (``--node-devices`` devices each, ``--group``).
"""

from __future__ import annotations

import argparse
import collections
import json
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

if __package__ in (None, ""):  # run as a script: make `tests.spark.sparkplug_pb` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.spark import sparkplug_pb as spb  # noqa: E402

__all__ = ["EdgeNode", "Fleet", "JsonDevice", "canonical", "temp_for"]

SPB = "spBv1.0"
Job = Iterator[None]  # a generator run step by step by the fleet's loop


def canonical(value: Any) -> str:
    """One text per distinct command: JSON with sorted keys."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def temp_for(index: int, seq: int) -> float:
    """The temperature device ``index`` reports at ``seq``: multiples of 0.25, so that sums and averages
    come out the same whatever the order of adding (every partial sum is exact in binary)."""
    return 20.0 + (index % 64) * 0.5 + (seq % 4) * 0.25


def _host_port(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[-1].rsplit("@", 1)[-1].split("/", 1)[0]
    host, _, port = rest.rpartition(":")
    return (host.strip("[]") or "127.0.0.1"), int(port or 1883)


class _Client:
    """One paho client of the fleet (a device's connection); subclasses say what it publishes."""

    def __init__(self, fleet: Fleet, client_id: str) -> None:
        self.fleet = fleet
        self.client_id = client_id
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=fleet.protocol,
                                  userdata=self)
        self.client.max_inflight_messages_set(fleet.window)
        self.client.max_queued_messages_set(0)
        self.client.on_connect = _on_connect
        self.client.on_subscribe = _on_subscribe
        self.client.on_message = _on_message
        self.client.on_publish = _on_publish
        self.client.on_disconnect = _on_disconnect
        self.connected = False
        self.subscribed = False
        self.disconnected = False
        self.sent = 0  # telemetry messages handed to paho
        self.acked = 0  # QoS 1 PUBLISHes the broker acknowledged (births included)
        self.published = 0  # QoS 1 PUBLISHes handed to paho (births included)
        self.sock: socket.socket | None = None

    # -- what subclasses define
    def subscriptions(self) -> list[str]:
        raise NotImplementedError

    def on_connected(self) -> None:
        """Right after CONNACK, on the fleet's thread (births go here)."""

    def handle(self, topic: str, payload: bytes) -> None:
        raise NotImplementedError

    def publish_telemetry(self, seq: int, qos: int) -> None:
        raise NotImplementedError

    # -- plumbing
    def publish(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        info = self.client.publish(topic, payload, qos=qos, retain=retain)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            raise RuntimeError(f"{self.client_id}: publish failed: {mqtt.error_string(info.rc)}")
        if qos:
            self.published += 1

    @property
    def outstanding(self) -> int:
        return self.published - self.acked


def _on_connect(client: mqtt.Client, dev: _Client, flags: Any, reason: Any, props: Any) -> None:
    if reason.is_failure:
        dev.fleet.errors.append(f"{dev.client_id}: CONNACK {reason}")
        return
    dev.connected = True
    subs = dev.subscriptions()
    if subs:
        client.subscribe([(t, 1) for t in subs])
    else:
        dev.subscribed = True
    dev.on_connected()


def _on_subscribe(client: mqtt.Client, dev: _Client, mid: int, codes: list[Any], props: Any) -> None:
    bad = [c for c in codes if c.is_failure]
    if bad:
        dev.fleet.errors.append(f"{dev.client_id}: SUBACK {bad}")
    dev.subscribed = True


def _on_message(client: mqtt.Client, dev: _Client, msg: mqtt.MQTTMessage) -> None:
    try:
        dev.handle(msg.topic, msg.payload)
    except Exception as exc:  # a malformed command is a finding, not a crash of the whole fleet
        dev.fleet.errors.append(f"{dev.client_id}: bad message on {msg.topic}: {exc!r}")
    dev.fleet._changed()


def _on_publish(client: mqtt.Client, dev: _Client, mid: int, reason: Any, props: Any) -> None:
    dev.acked += 1


def _on_disconnect(client: mqtt.Client, dev: _Client, flags: Any, reason: Any, props: Any) -> None:
    dev.connected = False
    dev.disconnected = True
    if not dev.fleet._closing:
        dev.fleet.errors.append(f"{dev.client_id}: disconnected: {reason}")
    dev.fleet._changed()


class JsonDevice(_Client):
    """A device speaking JSON over plain MQTT: telemetry out, commands in."""

    def __init__(self, fleet: Fleet, prefix: str, device: str, index: int) -> None:
        super().__init__(fleet, f"{prefix}-{device}")
        self.device, self.index = device, index
        self.telemetry_topic = f"{prefix}/{device}/telemetry"
        self.cmd_topic = f"{prefix}/{device}/cmd"
        self.temp_sum = 0.0
        self.commands: list[Any] = []  # parsed, in arrival order
        self.command_counts: collections.Counter[str] = collections.Counter()  # canonical(cmd) -> arrivals
        self.first_publish = 0.0

    def subscriptions(self) -> list[str]:
        return [self.cmd_topic]

    def handle(self, topic: str, payload: bytes) -> None:
        cmd = json.loads(payload)
        self.commands.append(cmd)
        self.command_counts[canonical(cmd)] += 1

    def publish_telemetry(self, seq: int, qos: int) -> None:
        temp = temp_for(self.index, seq)
        self.publish(self.telemetry_topic, json.dumps({"device": self.device, "seq": seq, "temp": temp}).encode(),
                     qos)
        self.temp_sum += temp
        self.sent += 1

    @property
    def expected(self) -> dict[str, Any]:
        """count and average temperature of what this device sent so far."""
        return {"count": self.sent, "avg_temp": self.temp_sum / self.sent if self.sent else None}


# Sparkplug metrics of each device: name, alias offset, datatype
DEVICE_METRICS = (("temp", 0, spb.DOUBLE), ("seq", 1, spb.INT64), ("level", 2, spb.INT32),
                  ("ok", 3, spb.BOOLEAN), ("state", 4, spb.STRING))
NODE_METRICS = (("bdSeq", 0, spb.INT64), ("Node Control/Rebirth", 1, spb.BOOLEAN), ("uptime", 2, spb.INT64))


class EdgeNode(_Client):
    """A Sparkplug B edge node (one MQTT client) with its devices."""

    def __init__(self, fleet: Fleet, group: str, edge_node: str, devices: Iterable[str], *, bd_seq: int = 0,
                 first_index: int = 0) -> None:
        super().__init__(fleet, f"{group}-{edge_node}")
        self.group, self.edge_node, self.devices = group, edge_node, list(devices)
        self.index = {d: first_index + i for i, d in enumerate(self.devices)}
        self.bd_seq = bd_seq
        self.seq = 0  # the next message's seq (0-255)
        # aliases: node metrics 1.., each device's metrics from 100 * (k + 1)
        self.node_aliases = {name: 1 + off for name, off, _ in NODE_METRICS}
        self.aliases: dict[str, dict[str, int]] = {
            d: {name: 100 * (k + 1) + off for name, off, _ in DEVICE_METRICS} for k, d in enumerate(self.devices)}
        self.datatypes = {name: dt for name, _, dt in (*DEVICE_METRICS, *NODE_METRICS)}
        self.by_alias: dict[int, str] = {a: n for n, a in self.node_aliases.items()}
        for per in self.aliases.values():
            self.by_alias.update({a: n for n, a in per.items()})
        self.sent_per_device: collections.Counter[str] = collections.Counter()
        self.temp_sum: collections.Counter[str] = collections.Counter()
        # commands: key device (None for NCMD) -> decoded {metric name: value}, arrival order
        self.commands: dict[str | None, list[dict[str, Any]]] = collections.defaultdict(list)
        self.command_counts: collections.Counter[tuple[str | None, str]] = collections.Counter()
        self.births = 0
        self.client.will_set(self.topic("NDEATH"), self._death_payload(), qos=1)

    def topic(self, message_type: str, device: str | None = None) -> str:
        t = f"{SPB}/{self.group}/{message_type}/{self.edge_node}"
        return f"{t}/{device}" if device else t

    def _death_payload(self) -> bytes:
        p = spb.Payload(timestamp=int(time.time() * 1000))
        p.metrics.append(spb.metric(name="bdSeq", datatype=spb.INT64, value=self.bd_seq))
        return bytes(p.SerializeToString())

    def _next_seq(self) -> int:
        s = self.seq
        self.seq = (self.seq + 1) % 256
        return s

    def subscriptions(self) -> list[str]:
        return [self.topic("NCMD"), self.topic("DCMD", "+")]

    def on_connected(self) -> None:
        self.seq = 0
        now = int(time.time() * 1000)
        p = spb.Payload(timestamp=now, seq=self._next_seq())
        for name, _off, dt in NODE_METRICS:
            value = {"bdSeq": self.bd_seq, "Node Control/Rebirth": False, "uptime": 0}[name]
            p.metrics.append(spb.metric(name=name, alias=self.node_aliases[name], datatype=dt, value=value,
                                        timestamp=now))
        self.publish(self.topic("NBIRTH"), p.SerializeToString(), 1)
        for d in self.devices:
            p = spb.Payload(timestamp=now, seq=self._next_seq())
            for name, _off, dt in DEVICE_METRICS:
                value = {"temp": temp_for(self.index[d], 0), "seq": 0, "level": -1, "ok": True, "state": "born"}[name]
                p.metrics.append(spb.metric(name=name, alias=self.aliases[d][name], datatype=dt, value=value,
                                            timestamp=now))
            self.publish(self.topic("DBIRTH", d), p.SerializeToString(), 1)
        self.births += 1

    def rebirth(self) -> None:
        """NBIRTH and every DBIRTH again (seq from 0), as on an NCMD Node Control/Rebirth."""
        self.on_connected()
        self.fleet._after_io(self)

    def publish_telemetry(self, seq: int, qos: int) -> None:
        """One DDATA per device: temp and seq by alias only (no name, no datatype)."""
        now = int(time.time() * 1000)
        for d in self.devices:
            temp = temp_for(self.index[d], seq)
            p = spb.Payload(timestamp=now, seq=self._next_seq())
            for name, value in (("temp", temp), ("seq", seq)):
                m = spb.metric(alias=self.aliases[d][name], timestamp=now)
                spb.set_value(m, self.datatypes[name], value)
                p.metrics.append(m)
            self.publish(self.topic("DDATA", d), p.SerializeToString(), qos)
            self.sent_per_device[d] += 1
            self.temp_sum[d] += temp
            self.sent += 1

    def expected(self, device: str) -> dict[str, Any]:
        n = self.sent_per_device[device]
        return {"count": n, "avg_temp": self.temp_sum[device] / n if n else None}

    def handle(self, topic: str, payload: bytes) -> None:
        parts = topic.split("/")
        if len(parts) < 4 or parts[0] != SPB or parts[2] not in ("NCMD", "DCMD"):
            raise ValueError(f"not a command topic: {topic}")
        device = parts[4] if parts[2] == "DCMD" and len(parts) > 4 else None
        p = spb.Payload.FromString(payload)
        if device is None and any((m.name == "Node Control/Rebirth" or m.alias == self.node_aliases[
                "Node Control/Rebirth"]) and m.boolean_value for m in p.metrics):
            self.on_connected()  # a host application asked for the births again
        decoded: dict[str, Any] = {}
        for m in p.metrics:
            name = m.name if m.HasField("name") else self.by_alias.get(m.alias, f"alias:{m.alias}")
            datatype = m.datatype if m.HasField("datatype") else self.datatypes.get(name)
            decoded[name] = spb.get_value(m, datatype) if datatype in spb._VALUE_FIELD else _any_value(m)
        self.commands[device].append(decoded)
        self.command_counts[(device, canonical(decoded))] += 1


def _any_value(m: Any) -> Any:
    field = m.WhichOneof("value")
    return None if field is None else getattr(m, field)


class Fleet:
    """Many device clients driven by one thread. ``url``: ``mqtt://host:port``."""

    def __init__(self, url: str, *, window: int = 100, keepalive: int = 60, nodelay: bool = True,
                 mqtt5: bool = False) -> None:
        self.host, self.port = _host_port(url)
        # MQTT 3.1.1 by default: what most devices (and Sparkplug B) speak
        self.protocol = mqtt.MQTTv5 if mqtt5 else mqtt.MQTTv311
        self.window = window  # QoS 1: unacknowledged PUBLISHes per client at most (paho's inflight limit)
        self.keepalive, self.nodelay = keepalive, nodelay
        self.json_devices: list[JsonDevice] = []
        self.edge_nodes: list[EdgeNode] = []
        self.errors: list[str] = []
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._writing: set[_Client] = set()
        self._jobs: collections.deque[Job] = collections.deque()
        self._calls: collections.deque[tuple[Callable[[], Any], threading.Event, list[Any]]] = collections.deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._closing = False
        self._last_misc = time.monotonic()

    # -- building the fleet (before connect)
    def add_json_devices(self, prefix: str, count: int, *, first: int = 0, name: str = "d{:04d}") -> list[JsonDevice]:
        devs = [JsonDevice(self, prefix, name.format(i), i) for i in range(first, first + count)]
        self.json_devices.extend(devs)
        return devs

    def add_edge_node(self, group: str, edge_node: str, devices: Iterable[str], **kw: Any) -> EdgeNode:
        node = EdgeNode(self, group, edge_node, devices, **kw)
        self.edge_nodes.append(node)
        return node

    @property
    def clients(self) -> list[_Client]:
        return [*self.json_devices, *self.edge_nodes]

    # -- the loop
    def _changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _after_io(self, c: _Client) -> None:
        if c.client.want_write():
            if c not in self._writing and c.sock is not None:
                self._writing.add(c)
                self._sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        elif c in self._writing:
            self._writing.discard(c)
            if c.sock is not None:
                self._sel.modify(c.sock, selectors.EVENT_READ, c)

    def _pump(self, timeout: float) -> None:
        for key, mask in self._sel.select(timeout):
            c = key.data
            if c is None:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except BlockingIOError:
                    pass
                continue
            if mask & selectors.EVENT_READ:
                c.client.loop_read()
            if mask & selectors.EVENT_WRITE and c.client.socket() is not None:
                c.client.loop_write()
            if c.client.socket() is None:  # closed while reading or writing
                self._forget(c)
            else:
                self._after_io(c)
        now = time.monotonic()
        if now - self._last_misc > 1.0:
            self._last_misc = now
            for c in self.clients:
                if c.sock is not None:
                    c.client.loop_misc()
                    self._after_io(c)

    def _forget(self, c: _Client) -> None:
        if c.sock is not None:
            try:
                self._sel.unregister(c.sock)
            except (KeyError, ValueError):
                pass
            c.sock = None
        self._writing.discard(c)

    def _step(self, timeout: float) -> None:
        while self._calls:
            fn, done, box = self._calls.popleft()
            try:
                box.append((True, fn()))
            except BaseException as exc:
                box.append((False, exc))
            done.set()
        if self._jobs:
            job = self._jobs[0]
            try:
                next(job)
            except StopIteration:
                self._jobs.popleft()
                self._changed()
            timeout = 0.0
        self._pump(timeout)

    def run_until(self, predicate: Callable[[], bool], timeout: float, what: str = "condition") -> None:
        """Drive the fleet in this thread until ``predicate()`` holds (TimeoutError after ``timeout`` s)."""
        assert self._thread is None or threading.current_thread() is self._thread
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.errors:
                raise RuntimeError("; ".join(self.errors[:5]))
            if time.monotonic() > deadline:
                raise TimeoutError(f"fleet: {what} not met within {timeout} s")
            self._step(0.05)

    def _on_loop(self, fn: Callable[[], Any], timeout: float = 60.0) -> Any:
        """Run ``fn`` on the fleet's thread (directly when there is none) and return its result."""
        if self._thread is None or threading.current_thread() is self._thread:
            return fn()
        done, box = threading.Event(), []
        self._calls.append((fn, done, box))
        self._wake()
        if not done.wait(timeout):
            raise TimeoutError("fleet thread did not answer")
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except BlockingIOError:
            pass

    # -- connecting
    def connect(self, timeout: float = 60.0) -> None:
        """Connect every client, subscribe, send the births; returns when all are done."""
        def start() -> None:
            for c in self.clients:
                if c.sock is not None:
                    continue
                c.client.connect(self.host, self.port, keepalive=self.keepalive)
                sock = c.client.socket()
                assert isinstance(sock, socket.socket)
                if self.nodelay:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                c.sock = sock
                self._sel.register(sock, selectors.EVENT_READ, c)
                self._after_io(c)
                if self._thread is None:
                    self._pump(0)  # read CONNACKs as they come: keep the receive buffers short
        self._on_loop(start)
        self.wait_until(lambda: all(c.connected and c.subscribed and c.outstanding == 0 for c in self.clients),
                        timeout, "every client connected, subscribed and born")

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str = "condition") -> None:
        """Wait until ``predicate()`` holds: in this thread's loop, or (started) for the fleet's thread."""
        if self._thread is None or threading.current_thread() is self._thread:
            self.run_until(predicate, timeout, what)
            return
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                if self.errors:
                    raise RuntimeError("; ".join(self.errors[:5]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"fleet: {what} not met within {timeout} s")
                self._cond.wait(min(left, 0.25))

    # -- publishing
    def _telemetry_job(self, messages: int, qos: int, clients: list[_Client], stats: dict[str, Any]) -> Job:
        window = self.window
        next_seq = {c: 0 for c in clients}
        pending = list(clients)
        first = True
        while pending:
            still = []
            for c in pending:
                seq = next_seq[c]
                if c.client.want_write() or (qos and c.outstanding >= window):
                    still.append(c)  # its socket or its window is full: later
                    continue
                if first:
                    stats["first_publish"] = time.time()
                    first = False
                c.publish_telemetry(seq, qos)
                self._after_io(c)
                next_seq[c] = seq + 1
                if seq + 1 < messages:
                    still.append(c)
            pending = still
            yield
        stats["last_publish"] = time.time()

    def publish_telemetry(self, messages: int, *, qos: int = 1, timeout: float = 600.0,
                          clients: list[_Client] | None = None) -> dict[str, Any]:
        """Every client publishes ``messages`` telemetry messages (seq 0..messages-1; an edge node one DDATA
        per device per seq) as fast as it can; returns once all are acknowledged (QoS 1) or written (QoS 0):
        ``{"first_publish", "last_publish", "done"}`` (``time.time()``)."""
        targets = list(self.clients if clients is None else clients)
        stats: dict[str, Any] = {}
        acked_before = {c: c.acked for c in targets}
        published_before = {c: c.published for c in targets}
        self._on_loop(lambda: self._jobs.append(self._telemetry_job(messages, qos, targets, stats)))
        self._wake()
        self.wait_until(lambda: "last_publish" in stats, timeout, "telemetry published")
        if qos:
            self.wait_until(lambda: all(c.acked - acked_before[c] >= c.published - published_before[c]
                                        for c in targets), timeout, "telemetry acknowledged")
        else:
            self.wait_until(lambda: not any(c.client.want_write() for c in targets), timeout, "telemetry written")
        stats["done"] = time.time()
        return stats

    def rebirth(self, nodes: list[EdgeNode] | None = None) -> None:
        """Edge nodes (all by default) publish their births again."""
        targets = list(self.edge_nodes if nodes is None else nodes)
        self._on_loop(lambda: [n.rebirth() for n in targets])
        self._wake()

    # -- lifecycle
    def start(self) -> Fleet:
        """Run the fleet's loop in one background thread (connect afterwards or before)."""
        assert self._thread is None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="fleet", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop:
            try:
                self._step(0.05)
            except BaseException as exc:
                self.errors.append(f"fleet loop: {exc!r}")
                self._changed()
                return
            if self.errors:
                self._changed()

    def close(self, *, death: bool = True) -> None:
        """Edge nodes send their NDEATH (``death``), every client disconnects; the thread (if any) stops."""
        def bye() -> None:
            self._closing = True
            for node in self.edge_nodes:
                if death and node.connected:
                    node.publish(node.topic("NDEATH"), node._death_payload(), 1)
            for c in self.clients:
                if c.sock is not None and c.connected:
                    c.client.disconnect()
                    self._after_io(c)
        try:
            self._on_loop(bye, 10)
            end = time.monotonic() + 5
            self.wait_until(lambda: all(not c.connected for c in self.clients) or time.monotonic() > end, 10,
                            "disconnected")
        except (TimeoutError, RuntimeError):
            pass
        if self._thread is not None:
            self._stop = True
            self._wake()
            self._thread.join(10)
            self._thread = None
        for c in self.clients:
            self._forget(c)
            if c.client.socket() is not None:
                c.client._sock_close()  # never said goodbye in time: drop the connection
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the publisher process of the bench ----------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="publish telemetry from simulated devices")
    ap.add_argument("--broker", required=True)
    ap.add_argument("--prefix", default="site1")
    ap.add_argument("--first", type=int, default=0, help="index of the first JSON device")
    ap.add_argument("--devices", type=int, default=0, help="JSON devices in this process")
    ap.add_argument("--group", default="fleet")
    ap.add_argument("--edge-nodes", type=int, default=0)
    ap.add_argument("--first-node", type=int, default=0)
    ap.add_argument("--node-devices", type=int, default=3)
    ap.add_argument("--messages", type=int, default=100, help="telemetry messages per device")
    ap.add_argument("--qos", type=int, default=1, choices=(0, 1))
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--no-go", action="store_true", help="publish at once, not at GO on stdin")
    args = ap.parse_args(argv)

    fleet = Fleet(args.broker, window=args.window)
    fleet.add_json_devices(args.prefix, args.devices, first=args.first)
    for n in range(args.first_node, args.first_node + args.edge_nodes):
        first_index = n * args.node_devices
        fleet.add_edge_node(args.group, f"e{n:03d}", [f"n{n:03d}d{k}" for k in range(args.node_devices)],
                            first_index=first_index)
    t0 = time.time()
    fleet.connect(timeout=120)
    connect_s = time.time() - t0
    print("READY", flush=True)
    if not args.no_go:
        line = sys.stdin.readline().strip()
        if line != "GO":
            fleet.close()
            return
    cpu = time.process_time()
    stats = fleet.publish_telemetry(args.messages, qos=args.qos)
    stats["cpu_s"] = time.process_time() - cpu
    sent = sum(c.sent for c in fleet.clients)
    fleet.close(death=False)
    print(json.dumps({"clients": len(fleet.clients), "sent": sent, "connect_s": connect_s, **stats,
                      "errors": fleet.errors[:5]}), flush=True)


if __name__ == "__main__":
    main()
