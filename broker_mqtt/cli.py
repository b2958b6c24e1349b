"""The ``broker-mqtt`` command line.

Exit codes: 0 success; 1 the command ran but its check failed (e.g. the demo did not see what it
expected); 2 usage errors (click's own); 3 the broker is unreachable or refused us.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import click

from . import __version__
from .endpoint import Endpoint
from .errors import BrokerUnavailable, MosquittoNotFound, UsageError
from .topics import validate_prefix, validate_topic

EXIT_CHECK_FAILED = 1
EXIT_UNREACHABLE = 3

broker_option = click.option(
    "--broker",
    envvar="BROKER_MQTT_URL",
    default=None,
    help="Broker URL, mqtt://[user:password@]host:port or mqtts://... (env BROKER_MQTT_URL). "
    "Required, except that demo then starts an embedded mosquitto and node may read it from --config.",
)
namespace_option = click.option("--namespace", default="bm", show_default=True, help="Topic namespace.")


def _fail(message: str, code: int) -> None:
    click.echo(f"broker-mqtt: {message}", err=True)
    sys.exit(code)


def _run(main: Any, *args: Any) -> Any:
    try:
        return anyio.run(main, *args)
    except BrokerUnavailable as exc:
        _fail(str(exc), EXIT_UNREACHABLE)
    except MosquittoNotFound as exc:
        _fail(str(exc), EXIT_UNREACHABLE)
    except UsageError as exc:
        _fail(str(exc), 2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="broker-mqtt")
def main() -> None:
    """Zeek Broker's model over MQTT 5: endpoints, topics, peers."""


# -- pub / sub ----------------------------------------------------------------------------------
@main.command()
@broker_option
@namespace_option
@click.argument("topic")
@click.argument("value")
@click.option("--raw", is_flag=True, help="Send VALUE as a string instead of parsing it as JSON.")
def pub(broker: str | None, namespace: str, topic: str, value: str, raw: bool) -> None:
    """Publish one VALUE (JSON, or a string with --raw) on TOPIC."""
    if broker is None:
        _fail("pub needs --broker (or BROKER_MQTT_URL): an embedded broker has no subscribers", 2)
    try:
        validate_topic(topic)
    except UsageError as exc:
        _fail(str(exc), 2)
    data: Any = value
    if not raw:
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            _fail(f"VALUE is not JSON ({exc}); use --raw to send a string", 2)

    async def run() -> None:
        async with Endpoint(broker, namespace=namespace, name="cli-pub") as ep:
            await ep.publish(topic, data)
            await ep.flush(10)

    _run(run)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


@main.command()
@broker_option
@namespace_option
@click.argument("prefixes", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--count", type=int, default=0, help="Stop after this many messages (0: run until Ctrl-C).")
def sub(broker: str | None, namespace: str, prefixes: tuple[str, ...], as_json: bool, count: int) -> None:
    """Print the messages published under topic PREFIXES."""
    if broker is None:
        _fail("sub needs --broker (or BROKER_MQTT_URL): nothing publishes on a private embedded broker", 2)
    try:
        for prefix in prefixes:
            validate_prefix(prefix)
    except UsageError as exc:
        _fail(str(exc), 2)

    async def run() -> None:
        async with Endpoint(broker, namespace=namespace, name="cli-sub") as ep, ep.subscribe(*prefixes) as s:
            n = 0
            async for msg in s:
                if as_json:
                    click.echo(json.dumps({"topic": msg.topic, "sender": str(msg.sender), "data": _jsonable(msg.data)}))
                else:
                    click.echo(f"{msg.topic} [{str(msg.sender)[:8]}] {msg.data!r}")
                n += 1
                if count and n >= count:
                    return

    _run(run)


from . import cli_bench, cli_demo, cli_node, cli_queue, cli_status, cli_store  # noqa: E402, F401 - the other commands

if __name__ == "__main__":  # pragma: no cover
    main()
