"""``broker-mqtt pub`` and ``sub``: one value out, node messages in."""

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


@click.command()
@broker_option
@connection_options
@namespace_option
@click.argument("topic")
@click.argument("value")
@click.option("--raw", is_flag=True, help="Send VALUE as a string instead of parsing it as JSON.")
def pub(broker: str | None, namespace: str, topic: str, value: str, raw: bool) -> None:
    """Publish one VALUE (JSON, or a string with --raw) on TOPIC."""
    if broker is None:
        fail("pub needs --broker (or BROKER_MQTT_URL): an embedded broker has no subscribers", 2)
    try:
        validate_topic(topic)
    except UsageError as exc:
        fail(str(exc), 2)
    data: Any = value
    if not raw:
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            fail(f"VALUE is not JSON ({exc}); use --raw to send a string", 2)

    async def run() -> None:
        async with Endpoint(broker, namespace=namespace, name="cli-pub", **cli_endpoint(broker)) as ep:
            await ep.publish(topic, data)
            await ep.flush(10)

    run_command(run)



@click.command()
@broker_option
@connection_options
@namespace_option
@click.argument("prefixes", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--count", type=int, default=0, help="Stop after this many messages (0: run until Ctrl-C).")
def sub(broker: str | None, namespace: str, prefixes: tuple[str, ...], as_json: bool, count: int) -> None:
    """Print the messages published under topic PREFIXES."""
    if broker is None:
        fail("sub needs --broker (or BROKER_MQTT_URL): nothing publishes on a private embedded broker", 2)
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

