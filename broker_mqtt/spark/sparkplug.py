"""Sparkplug B for the Spark bridge: topics, a stateful decoder to metric rows, command encoding.

Theory of operation. Sparkplug B edge nodes (PLC gateways) publish on
``spBv1.0/<group>/<type>/<edge node>[/<device>]`` protobuf payloads (:mod:`.sparkplug_wire`). A
birth certificate (NBIRTH, DBIRTH) lists every metric with its name, datatype and, optionally, an
alias; later data messages (NDATA, DDATA) may carry the alias alone and no datatype, so a
:class:`SparkplugDecoder` keeps, per ``(group, edge node)``, what the births said: the aliases
(unique across the node and all its devices, per the specification), the datatypes by name, the
node's ``bdSeq`` (the birth/death session number) and whether the node and each device is online.
:meth:`SparkplugDecoder.receive` turns one message into one :class:`MetricRow` per metric (one row
with ``metric=None`` when the message has none, so a DDEATH's state is visible). An NDEATH counts
only when its ``bdSeq`` matches the current NBIRTH's: a late death from an older session is
ignored and counted in ``stale_deaths``. ``seq`` (0..255, wrapping) is checked per edge node over
NBIRTH, DBIRTH, DDEATH, NDATA and DDATA; a jump counts in ``seq_gaps``. An alias no birth
declared yields a row with ``metric=None`` and the field's raw value (``unknown_alias``), never an
error; a seq outside 0..255 is malformed. Everything is
decoded before the state changes, so a malformed message raises
:class:`~broker_mqtt.errors.DecodeError`, counts in ``malformed`` and leaves the state as it
was. STATE messages (a host application's JSON, not protobuf) yield no rows and count in
``state_messages``; NCMD/DCMD decode like data messages, with aliases resolved and the online
state unchanged. :func:`command_topic` and :func:`command_payload` build the NCMD/DCMD the Spark
sink publishes. No I/O and no clock here: callers pass timestamps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import DecodeError, UsageError, peer_repr
from .sparkplug_wire import (
    DataType,
    Metric,
    Payload,
    RawValue,
    decode_payload,
    encode_payload,
    infer_datatype,
    metric_value,
)

__all__ = [
    "NAMESPACE", "MESSAGE_TYPES", "DataType", "Metric", "Payload", "RawValue", "SparkplugTopic", "MetricRow",
    "SparkplugDecoder", "SparkplugStatistics", "decode_payload", "encode_payload", "command_topic",
    "command_payload",
]

NAMESPACE = "spBv1.0"
NODE_TYPES = frozenset({"NBIRTH", "NDEATH", "NDATA", "NCMD"})
DEVICE_TYPES = frozenset({"DBIRTH", "DDEATH", "DDATA", "DCMD"})
MESSAGE_TYPES = NODE_TYPES | DEVICE_TYPES | {"STATE"}
#: The message types whose ``seq`` follows the edge node's sequence (NDEATH, the will, has none).
_SEQUENCED = frozenset({"NBIRTH", "DBIRTH", "DDEATH", "NDATA", "DDATA"})
_KNOWN_TYPES = frozenset(int(dt) for dt in DataType)


def _bad_id(value: str) -> bool:
    return not value or any(c in value for c in "/+#")


@dataclass(frozen=True, slots=True)
class SparkplugTopic:
    """A parsed Sparkplug topic. STATE (``spBv1.0/STATE/<host id>``) has ``group=""`` and the host
    id as ``edge_node``."""

    group: str
    message_type: str
    edge_node: str
    device: str | None

    @classmethod
    def parse(cls, topic: str) -> SparkplugTopic:
        """DecodeError unless ``topic`` is a Sparkplug B topic of a known type with its levels."""
        parts = topic.split("/")
        if parts[0] != NAMESPACE:
            raise DecodeError(f"not a Sparkplug B topic (namespace {NAMESPACE}): {peer_repr(topic)}")
        if len(parts) == 3 and parts[1] == "STATE":
            if _bad_id(parts[2]):
                raise DecodeError(f"bad host id in Sparkplug STATE topic {peer_repr(topic)}")
            return cls("", "STATE", parts[2], None)
        if len(parts) < 4 or parts[2] not in MESSAGE_TYPES or parts[2] == "STATE":
            raise DecodeError(f"not a Sparkplug B message type in {peer_repr(topic)}")
        expected = 4 if parts[2] in NODE_TYPES else 5
        if len(parts) != expected:
            raise DecodeError(f"a Sparkplug {parts[2]} topic has {expected} levels, not {len(parts)}: "
                              f"{peer_repr(topic)}")
        if any(_bad_id(part) for part in parts[1:]):
            raise DecodeError(f"empty or wildcard id in Sparkplug topic {peer_repr(topic)}")
        return cls(parts[1], parts[2], parts[3], parts[4] if expected == 5 else None)

    def __str__(self) -> str:
        if self.message_type == "STATE":
            return f"{NAMESPACE}/STATE/{self.edge_node}"
        tail = "" if self.device is None else f"/{self.device}"
        return f"{NAMESPACE}/{self.group}/{self.message_type}/{self.edge_node}{tail}"


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One metric of one message, for the Spark source."""

    topic: str
    group: str
    message_type: str
    edge_node: str
    device: str | None
    online: bool | None  #: the node's (device's) state after this message; None before any birth/death
    seq: int | None
    timestamp: int | None  #: the metric's timestamp, else the payload's (ms since the epoch)
    metric: str | None  #: the name, from the birth when the message carries only an alias
    alias: int | None
    datatype: str | None  #: the DataType name, from the message or the birth
    value: Any  #: None if null; the raw field's value when the datatype is unknown


@dataclass(frozen=True, slots=True)
class SparkplugStatistics:
    messages: int
    rows: int
    malformed: int
    unknown_alias: int
    stale_deaths: int
    seq_gaps: int
    state_messages: int


@dataclass
class _Node:
    online: bool | None = None
    bdseq: int | None = None
    seq: int | None = None
    #: alias -> (owner device or None for the node, name, datatype)
    aliases: dict[int, tuple[str | None, str | None, int | None]] = field(default_factory=dict)
    #: owner (device or None) -> name -> datatype
    names: dict[str | None, dict[str, int | None]] = field(default_factory=dict)
    devices: dict[str, bool] = field(default_factory=dict)


def _bdseq(payload: Payload) -> int | None:
    for metric in payload.metrics:
        if metric.name == "bdSeq" and isinstance(metric.value, int) and not isinstance(metric.value, bool):
            return metric.value
    return None


class SparkplugDecoder:
    """Sparkplug B messages to :class:`MetricRow` lists, remembering births per edge node."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[str, str], _Node] = {}
        self.messages = 0
        self.rows = 0
        self.malformed = 0
        self.unknown_alias = 0
        self.stale_deaths = 0
        self.seq_gaps = 0
        self.state_messages = 0

    def statistics(self) -> SparkplugStatistics:
        return SparkplugStatistics(self.messages, self.rows, self.malformed, self.unknown_alias,
                                   self.stale_deaths, self.seq_gaps, self.state_messages)

    def online(self, group: str, edge_node: str, device: str | None = None) -> bool | None:
        """The node's (device's) state as the births and deaths so far tell it; None if unknown."""
        node = self._nodes.get((group, edge_node))
        if node is None:
            return None
        return node.online if device is None else node.devices.get(device)

    def receive(self, topic: str, payload: bytes) -> list[MetricRow]:
        """The rows of one message; DecodeError (counted, state unchanged) if it is malformed."""
        try:
            parsed = SparkplugTopic.parse(topic)
            if parsed.message_type == "STATE":
                self.state_messages += 1
                self.messages += 1
                return []
            decoded = decode_payload(payload)
            if decoded.seq is not None and decoded.seq > 255:
                raise DecodeError(f"Sparkplug seq {decoded.seq} out of 0..255")
            node = self._nodes.get((parsed.group, parsed.edge_node)) or _Node()
            resolved = self._resolve(parsed, decoded, node)
        except DecodeError:
            self.malformed += 1
            raise
        self._apply(parsed, decoded, resolved)
        node = self._nodes[(parsed.group, parsed.edge_node)]
        online = node.online if parsed.device is None else node.devices.get(parsed.device)
        rows = [MetricRow(topic, parsed.group, parsed.message_type, parsed.edge_node, parsed.device, online,
                          decoded.seq, ts, name, alias, dt, value)
                for ts, name, alias, dt, value in resolved]
        if not rows:
            rows = [MetricRow(topic, parsed.group, parsed.message_type, parsed.edge_node, parsed.device, online,
                              decoded.seq, decoded.timestamp, None, None, None, None)]
        self.messages += 1
        self.rows += len(rows)
        return rows

    def _resolve(self, topic: SparkplugTopic, payload: Payload, node: _Node
                 ) -> list[tuple[int | None, str | None, int | None, str | None, Any]]:
        """(timestamp, name, alias, datatype name, value) per metric; reads the state, never writes."""
        birth = topic.message_type in ("NBIRTH", "DBIRTH")
        out = []
        for metric in payload.metrics:
            name, datatype = metric.name, metric.datatype
            if not birth:
                if metric.alias is not None and metric.alias in node.aliases:
                    _, known_name, known_type = node.aliases[metric.alias]
                    name = name if name is not None else known_name
                    datatype = datatype if datatype is not None else known_type
                elif name is not None and datatype is None:
                    datatype = node.names.get(topic.device, {}).get(name)
            value = None if metric.is_null else metric_value(datatype, metric.raw)
            type_name = DataType(datatype).name if datatype is not None and datatype in _KNOWN_TYPES else None
            timestamp = metric.timestamp if metric.timestamp is not None else payload.timestamp
            out.append((timestamp, name, metric.alias, type_name, value))
        return out

    def _apply(self, topic: SparkplugTopic, payload: Payload, resolved: list[tuple[Any, ...]]) -> None:
        key = (topic.group, topic.edge_node)
        kind = topic.message_type
        node = self._nodes.get(key)
        if node is None:
            node = self._nodes[key] = _Node()
        if kind == "NBIRTH":  # a new session: the old births are void, the devices must be born again
            node.aliases, node.names = {}, {}
            node.devices = dict.fromkeys(node.devices, False)
        if kind in _SEQUENCED:
            self._check_seq(node, payload, birth=kind == "NBIRTH")
        if kind in ("NBIRTH", "DBIRTH"):
            owner = topic.device
            node.aliases = {a: v for a, v in node.aliases.items() if v[0] != owner}
            names = node.names[owner] = {}
            for metric in payload.metrics:
                if metric.name is not None:
                    names[metric.name] = metric.datatype
                if metric.alias is not None:
                    node.aliases[metric.alias] = (owner, metric.name, metric.datatype)
            if owner is None:
                node.online, node.bdseq = True, _bdseq(payload)
            else:
                node.devices[owner] = True
        elif kind == "NDEATH":
            death = _bdseq(payload)
            if node.bdseq is not None and death is not None and death != node.bdseq:
                self.stale_deaths += 1
            else:
                node.online = False
                node.devices = dict.fromkeys(node.devices, False)
        elif kind == "DDEATH" and topic.device is not None:
            node.devices[topic.device] = False
        elif kind in ("NDATA", "DDATA", "NCMD", "DCMD"):
            for _, name, alias, _, _ in resolved:
                if name is None and alias is not None:
                    self.unknown_alias += 1

    def _check_seq(self, node: _Node, payload: Payload, *, birth: bool) -> None:
        seq = payload.seq
        if seq is None:
            return
        if not birth and node.seq is not None and seq != (node.seq + 1) % 256:
            self.seq_gaps += 1
        node.seq = seq


def command_topic(group: str, edge_node: str, device: str | None) -> str:
    """The NCMD topic of an edge node (``device=None``) or the DCMD topic of one of its devices."""
    for what, value in (("group", group), ("edge node", edge_node), ("device", device)):
        if value is None and what == "device":
            continue
        if not isinstance(value, str) or _bad_id(value):
            raise UsageError(f"Sparkplug {what} id must be a non-empty string without '/', '+', '#': "
                             f"{value!r:.60}")
    kind = "NCMD" if device is None else "DCMD"
    return str(SparkplugTopic(group, kind, edge_node, device))


def command_payload(metrics: Sequence[tuple[str, Any, DataType | None]], timestamp: int) -> bytes:
    """An NCMD/DCMD payload writing ``(name, value, datatype)`` metrics; a datatype of None is
    inferred from the value (bool, int -> Int64, float -> Double, str, bytes); a value of None is a
    null metric (its datatype must be given). UsageError for a value that does not fit."""
    built = []
    for name, value, datatype in metrics:
        if not isinstance(name, str) or not name:
            raise UsageError(f"a Sparkplug metric name must be a non-empty string, not {name!r:.60}")
        if value is None:
            if datatype is None:
                raise UsageError(f"metric {name!r}: a null value needs an explicit datatype")
            built.append(Metric(name, None, None, int(datatype), None, is_null=True))
            continue
        if datatype is not None and datatype not in _KNOWN_TYPES:
            raise UsageError(f"metric {name!r}: unknown Sparkplug datatype {datatype!r:.40}")
        dt = infer_datatype(value) if datatype is None else DataType(datatype)
        built.append(Metric(name, None, None, int(dt), value))
    return encode_payload(Payload(timestamp, tuple(built)))
