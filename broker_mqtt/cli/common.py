"""What every ``broker-mqtt`` command shares: exit codes, options, running and failing.

Exit codes: 0 success; 1 the command ran but its check failed (e.g. the demo did not see what it
expected); 2 usage errors (click's own); 3 the broker is unreachable or refused us.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import anyio
import click

from ..errors import BrokerUnavailable, MosquittoNotFound, UsageError
from ..transport.broker_url import TLSOptions
from ..transport.keyfiles import load_private_key, load_trust_file
from ..wire.identity import validate_client_id

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

_F = TypeVar("_F", bound=Callable[..., Any])
_TLS_FILES = {  # option name: (environment variable, help)
    "ca_file": ("BROKER_MQTT_CA_FILE", "CA certificate(s) to verify an mqtts:// broker with (default: the system's)."),
    "cert_file": ("BROKER_MQTT_CERT_FILE", "Client certificate to present to an mqtts:// broker (PEM)."),
    "key_file": ("BROKER_MQTT_KEY_FILE", "Private key of --cert-file (PEM; default: in --cert-file)."),
}


def _remember_tls(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    ctx.meta[f"broker_mqtt.tls.{param.name}"] = value


_IDENTITY = {  # option name: (environment variable, help, a file?)
    "client_id": ("BROKER_MQTT_CLIENT_ID", "MQTT client id, named in every topic this endpoint publishes to: "
                  "the principal's name under a broker ACL (docs/security.md).", False),
    "signing_key": ("BROKER_MQTT_SIGNING_KEY", "Ed25519 key file (broker-mqtt keys generate): seal every "
                    "PUBLISH (docs/signing.md).", True),
    "trust": ("BROKER_MQTT_TRUST", "Trust file of public keys by client id: drop what they did not seal.", True),
}


def connection_options(command: _F) -> _F:
    """Adds --ca-file, --cert-file, --key-file, --client-id, --signing-key and --trust (env
    BROKER_MQTT_CA_FILE, ...); read them with :func:`cli_endpoint` inside the command."""
    for name, (env, text, is_file) in reversed(_IDENTITY.items()):
        command = click.option(f"--{name.replace('_', '-')}", name, envvar=env, expose_value=False,
                               callback=_remember_tls, help=text + f" Env {env}.",
                               type=click.Path(exists=True, dir_okay=False) if is_file else str)(command)
    for name, (env, text) in reversed(_TLS_FILES.items()):
        command = click.option(f"--{name.replace('_', '-')}", name, envvar=env, expose_value=False,
                               callback=_remember_tls, help=text + f" Env {env}.",
                               type=click.Path(exists=True, dir_okay=False))(command)
    return command


def cli_endpoint(broker: str | None) -> dict[str, Any]:
    """The Endpoint keyword arguments the command line gave: ``tls`` (:func:`cli_tls`), and
    ``client_id``, ``signing_key`` and ``trust`` when given. Exits with code 2 for a key or trust
    file that does not load (the message says why)."""
    meta = click.get_current_context().meta
    out: dict[str, Any] = {"tls": cli_tls(broker)}
    client_id, key_file, trust_file = (meta.get(f"broker_mqtt.tls.{n}") for n in _IDENTITY)
    try:
        if client_id:
            out["client_id"] = validate_client_id(client_id)
        if key_file:
            out["signing_key"] = load_private_key(key_file)
        if trust_file:
            out["trust"] = load_trust_file(trust_file)
    except UsageError as exc:
        raise click.UsageError(str(exc)) from None
    return out


def cli_tls(broker: str | None) -> TLSOptions | None:
    """The :class:`TLSOptions` the command line gave for ``broker`` (None when it gave none: an
    mqtts:// URL then verifies the broker against the system CAs). Raises :class:`click.UsageError`
    (exit code 2) when files are given for a broker that is not mqtts://."""
    meta = click.get_current_context().meta
    files: dict[str, str | None] = {name: meta.get(f"broker_mqtt.tls.{name}") for name in _TLS_FILES}
    if not any(files.values()):
        return None
    if not (broker or "").startswith("mqtts://"):
        raise click.UsageError("--ca-file, --cert-file and --key-file need an mqtts:// broker URL")
    if files["key_file"] and not files["cert_file"]:
        raise click.UsageError("--key-file needs --cert-file")
    return TLSOptions(ca_file=files["ca_file"], cert_file=files["cert_file"], key_file=files["key_file"])


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
