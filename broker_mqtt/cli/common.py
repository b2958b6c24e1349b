"""What every ``broker-mqtt`` command shares: exit codes, options, running and failing.

Exit codes: 0 success; 1 the command ran but its check failed (e.g. the demo did not see what it
expected); 2 usage errors (click's own); 3 the broker is unreachable or refused us.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import anyio
import click

from ..errors import BrokerUnavailable, MosquittoNotFound, UsageError

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


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"broker-mqtt: {message}", err=True)
    sys.exit(code)


def run_command(main: Any, *args: Any) -> Any:
    try:
        return anyio.run(main, *args)
    except BrokerUnavailable as exc:
        fail(str(exc), EXIT_UNREACHABLE)
    except MosquittoNotFound as exc:
        fail(str(exc), EXIT_UNREACHABLE)
    except UsageError as exc:
        fail(str(exc), 2)

def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def parse_value(text: str, what: str) -> Any:
    """JSON if it parses, else the text itself (so `fan` and `"fan"` are the same key)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def need_broker(broker: str | None, command: str, what: str = "store") -> str:
    if broker is None:
        fail(f"{what} {command} needs --broker (or BROKER_MQTT_URL): an embedded broker has no {what}", 2)
    return broker
