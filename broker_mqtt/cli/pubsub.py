"""``broker-mqtt pub`` and ``sub``: one value out, node messages in (with --raw:
plain MQTT topics and payloads, see raw.py)."""

from __future__ import annotations

import json
from typing import Any

import click

from ..endpoint.endpoint import Endpoint
from ..errors import UsageError
from ..wire.topics import validate_prefix, validate_topic
from .common import (
    broker_option,
    cli_endpoint,
    connection_options,
    fail,
    jsonable,
    namespace_option,
    run_command,
)
from .raw import PUB_HELP, SUB_HELP, raw_pub, raw_sub


@click.command(epilog=PUB_HELP)
@broker_option
@connection_options
@namespace_option
@click.argument("topic")
@click.argument("value")
@click.option("--string", "as_string", is_flag=True,
              help="Send VALUE as a string node message instead of parsing it as JSON (formerly --raw).")
@click.option("--raw", is_flag=True, help="Publish VALUE's UTF-8 bytes as they are on the plain MQTT topic TOPIC.")
@click.option("--qos", type=click.IntRange(0, 1), default=None, help="QoS 0 or 1 (default: 1 with --raw).")
@click.option("--retain", is_flag=True, help="With --raw: the broker keeps the message for later subscribers.")
def pub(broker: str | None, namespace: str, topic: str, value: str, as_string: bool, raw: bool,
        qos: int | None, retain: bool) -> None:
    """Publish one VALUE (JSON, or a string with --string) on TOPIC, or with --raw bytes on a
    plain MQTT topic."""
    if broker is None:
        fail("pub needs --broker (or BROKER_MQTT_URL): an embedded broker has no subscribers", 2)
    if raw and as_string:
        fail("--raw and --string do not go together: --raw sends VALUE's bytes as they are", 2)
    if retain and not raw:
        fail("--retain needs --raw: node messages are never retained", 2)
    if raw:
        try:
            raw_pub(broker, namespace, topic, value, 1 if qos is None else qos, retain)
        except UsageError as exc:
            fail(str(exc), 2)
        return
    try:
        validate_topic(topic)
    except UsageError as exc:
        fail(str(exc), 2)
    data: Any = value
    if not as_string:
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            fail(f"VALUE is not JSON ({exc}); use --string to send a string", 2)

    async def run() -> None:
        async with Endpoint(broker, namespace=namespace, name="cli-pub", **cli_endpoint(broker)) as ep:
            await ep.publish(topic, data, qos=qos)
            await ep.flush(10)

    run_command(run)


@click.command(epilog=SUB_HELP)
@broker_option
@connection_options
@namespace_option
@click.argument("prefixes", nargs=-1, required=True)
@click.option("--raw", is_flag=True, help="PREFIXES are plain MQTT topic filters; print payloads as they are.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--count", type=int, default=0, help="Stop after this many messages (0: run until Ctrl-C).")
def sub(broker: str | None, namespace: str, prefixes: tuple[str, ...], raw: bool, as_json: bool, count: int) -> None:
    """Print the messages published under topic PREFIXES (with --raw: on MQTT filters)."""
    if broker is None:
        fail("sub needs --broker (or BROKER_MQTT_URL): nothing publishes on a private embedded broker", 2)
    if raw:
        try:
            raw_sub(broker, namespace, prefixes, as_json, count)
        except UsageError as exc:
            fail(str(exc), 2)
        return
    try:
        for prefix in prefixes:
            validate_prefix(prefix)
    except UsageError as exc:
        fail(str(exc), 2)

    async def run() -> None:
        async with Endpoint(broker, namespace=namespace, name="cli-sub", **cli_endpoint(broker)) as ep, ep.subscribe(*prefixes) as s:
            n = 0
            async for msg in s:
                if as_json:
                    click.echo(json.dumps({"topic": msg.topic, "sender": str(msg.sender), "data": jsonable(msg.data)}))
                else:
                    click.echo(f"{msg.topic} [{str(msg.sender)[:8]}] {msg.data!r}")
                n += 1
                if count and n >= count:
                    return

    run_command(run)

