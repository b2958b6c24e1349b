"""Incoming MQTT 5 PUBLISH packets, decoded straight from the bytes read (sans-io).

paho decodes every packet it reads: a PUBLISH becomes an ``MQTTMessage`` with a ``Properties``
object, is logged, matched against per-topic callbacks and handed to aiomqtt, which wraps it once
more; ~30 µs of Python per PUBLISH on a 2-core machine, the largest part of what a busy endpoint
spends per message received. :func:`take_publish` decodes the usual PUBLISH (QoS 0 or 1, a topic
name, the properties MQTT 5 allows on a PUBLISH) from the read buffer in a few µs, and the
transport hands it on as a :class:`~.base.Received`. Anything else is left to paho, unchanged:
another packet type, QoS 2, a Topic Alias, a topic that is not UTF-8 or holds a wildcard, a
malformed packet, a packet not yet read in full. Pure functions: no I/O, no state.
"""

from __future__ import annotations

from typing import NamedTuple

from .base import Received

__all__ = ["Publish", "take_publish"]

_PUBLISH = 3
_SUBSCRIPTION_ID = 0x0B
_PAYLOAD_FORMAT = 0x01
_USER_PROPERTY = 0x26
# the other properties a PUBLISH may carry, skipped: identifier -> a fixed size in bytes, or what comes
_STRING, _BINARY, _PAIR = -1, -2, -3  # a UTF-8 string or binary data (a two-byte length, then as many
# bytes), or two strings (a user property's name and value)
_SKIPPED = {0x01: 1, 0x02: 4, 0x03: _STRING, 0x08: _STRING, 0x09: _BINARY, 0x26: _PAIR}


class Publish(NamedTuple):
    """A PUBLISH :func:`take_publish` decoded: what it carries, its packet identifier (0 at QoS 0),
    and where the packet after it begins."""

    received: Received
    packet_id: int
    end: int


def _varint(data: bytes, pos: int, limit: int) -> tuple[int, int] | None:
    """The variable byte integer at ``pos`` (before ``limit``) and the position after it; None if
    it runs past ``limit`` or over four bytes."""
    value, shift = 0, 0
    for i in range(pos, min(pos + 4, limit)):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    return None


def take_publish(data: bytes, pos: int) -> Publish | None:
    """The PUBLISH that begins at ``data[pos]``, when it is one this module decodes and all of it is
    in ``data``; otherwise None, and the caller lets paho read from ``pos`` on (module docstring).

    Decodes as paho does: the topic as UTF-8; the Subscription Identifiers in the order they come;
    the Payload Format Indicator, Message Expiry Interval, Content Type, Response Topic, Correlation
    Data and User Properties checked as paho checks them (length, UTF-8 without U+0000 or U+FEFF,
    a format indicator of 0 or 1, none but a user property twice) and skipped: nothing here uses them.
    Whatever paho would refuse (a property not allowed on a PUBLISH, one past the properties'
    length, a Subscription Identifier or a QoS 1 packet identifier of 0) is left to paho, to refuse
    as it does."""
    end_of_data = len(data)
    if pos >= end_of_data:
        return None
    first = data[pos]
    qos = (first >> 1) & 3
    if first >> 4 != _PUBLISH or qos > 1:
        return None
    length = _varint(data, pos + 1, end_of_data)
    if length is None:
        return None
    remaining, at = length
    end = at + remaining
    if end > end_of_data or at + 2 > end:
        return None
    topic_len = int.from_bytes(data[at:at + 2], "big")
    at += 2
    if topic_len == 0 or at + topic_len > end:
        return None  # an empty topic comes with a Topic Alias: paho's
    try:
        topic = data[at:at + topic_len].decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "+" in topic or "#" in topic:
        return None  # never sent by a broker; aiomqtt refuses it (and with it the connection)
    at += topic_len
    packet_id = 0
    if qos:
        if at + 2 > end:
            return None
        packet_id = int.from_bytes(data[at:at + 2], "big")
        if packet_id == 0:
            return None  # not allowed at QoS 1: paho's
        at += 2
    props = _varint(data, at, end)
    if props is None:
        return None
    props_len, at = props
    props_end = at + props_len
    if props_end > end:
        return None
    sub_ids: list[int] = []
    seen = 0  # bits of the single-valued properties met (each may come once)
    while at < props_end:
        ident = data[at]
        at += 1
        if ident == _SUBSCRIPTION_ID:
            got = _varint(data, at, props_end)
            if got is None or got[0] == 0:
                return None
            sub_id, at = got
            sub_ids.append(sub_id)
            continue
        size = _SKIPPED.get(ident)
        if size is None:
            return None  # a Topic Alias, or not a PUBLISH property: paho's
        if ident != _USER_PROPERTY:
            if seen >> ident & 1:
                return None
            seen |= 1 << ident
        if size > 0:
            if ident == _PAYLOAD_FORMAT and at < props_end and data[at] > 1:
                return None
            at += size
        else:
            for _ in range(2 if size == _PAIR else 1):
                if at + 2 > props_end:
                    return None
                start, at = at + 2, at + 2 + int.from_bytes(data[at:at + 2], "big")
                if at > props_end:
                    return None
                if size != _BINARY:
                    try:
                        text = data[start:at].decode("utf-8")  # as paho, which decodes them
                    except UnicodeDecodeError:
                        return None
                    if "\x00" in text or "\ufeff" in text:
                        return None  # paho refuses these (MQTT-1.5.4-2 and -3)
        if at > props_end:
            return None
    return Publish(Received(topic, bytes(data[props_end:end]), qos, bool(first & 1), tuple(sub_ids)), packet_id, end)
