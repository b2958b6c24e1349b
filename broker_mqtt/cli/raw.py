"""``broker-mqtt sub --raw`` and ``pub --raw``: plain MQTT topics, no node-message envelope.

For fleets of ordinary MQTT devices (Tasmota, Zigbee2MQTT, Sparkplug gateways): their payloads
are shown as text when they are printable UTF-8, else as hex, and published as the bytes given.
"""

from __future__ import annotations

import base64
import json
import sys

import click

from ..endpoint.endpoint import Endpoint
from ..endpoint.subscription import RawMessage
from ..wire.topics import validate_mqtt_filter, validate_mqtt_topic
from .common import cli_endpoint, run_command


def validate_filter(mqtt_filter: str) -> str:
    """``mqtt_filter`` if MQTT accepts it as a topic filter; :class:`UsageError` saying why not."""
    return validate_mqtt_filter(mqtt_filter)


def validate_raw_topic(topic: str) -> str:
    """``topic`` if MQTT accepts it as a topic to publish on; :class:`UsageError` saying why not."""
    return validate_mqtt_topic(topic)


def payload_text(payload: bytes) -> str:
    """The payload as its UTF-8 text when it decodes and is printable (no newlines or other
    control characters), else as ``0x`` and hex digits (``0x`` alone for an empty payload)."""
    if payload:
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            if text.isprintable():
                return text
    return "0x" + payload.hex()


def format_line(msg: RawMessage) -> str:
    return f"{msg.topic} {'[retained] ' if msg.retain else ''}{payload_text(msg.payload)}"


def format_json(msg: RawMessage) -> str:
    out: dict[str, object] = {"topic": msg.topic, "retain": msg.retain}
    try:
        out["payload"] = msg.payload.decode("utf-8")
    except UnicodeDecodeError:
        out["payload_base64"] = base64.b64encode(msg.payload).decode("ascii")
    return json.dumps(out, ensure_ascii=False)


SUB_HELP = """With --raw, FILTERS are plain MQTT topic filters (wildcards '+' and '#' allowed, e.g.
'site1/+/telemetry') and the payloads are shown as they are, with no node-message envelope: one line
'TOPIC [retained] PAYLOAD' per message, PAYLOAD as text when it is printable UTF-8 and otherwise as
0x followed by hex. With --json: {"topic", "retain", "payload"} per line, or "payload_base64" instead
of "payload" when the bytes are not UTF-8. Once subscribed, sub --raw says so on stderr."""

PUB_HELP = """With --raw, TOPIC is a plain MQTT topic (no wildcards) and VALUE's UTF-8 bytes are published
as they are, with no node-message envelope ('-' as VALUE: the bytes read from stdin); --qos (default
1) and --retain apply. --string is what --raw meant before: VALUE as a string node message."""


def raw_sub(broker: str, namespace: str, filters: tuple[str, ...], as_json: bool, count: int) -> None:
    for f in filters:
        validate_filter(f)

    async def run() -> None:
        async with Endpoint(broker, namespace=namespace, name="cli-sub", **cli_endpoint(broker)) as ep, \
                ep.subscribe_raw(*filters) as s:
            click.echo(f"broker-mqtt: subscribed to {' '.join(filters)}", err=True)
            n = 0
            async for msg in s:
                click.echo(format_json(msg) if as_json else format_line(msg))
                n += 1
                if count and n >= count:
                    return

    run_command(run)


def raw_pub(broker: str, namespace: str, topic: str, value: str, qos: int, retain: bool) -> None:
    validate_raw_topic(topic)
    payload = sys.stdin.buffer.read() if value == "-" else value.encode("utf-8", "surrogateescape")

    async def run() -> None:
        async with Endpoint(broker, namespace=namespace, name="cli-pub", **cli_endpoint(broker)) as ep:
            await ep.publish_raw(topic, payload, qos=qos, retain=retain)
            await ep.flush(10)

    run_command(run)
