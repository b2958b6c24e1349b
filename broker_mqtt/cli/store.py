"""``broker-mqtt store ...`` and ``broker-mqtt peers``: elected stores and peers from the command line.

``store get``/``keys``/``watch`` keep a replica that never becomes master (``candidate=False``) for the
duration of the command; ``store put``/``erase`` write through a :class:`~broker_mqtt.store.StoreWriter`
(no replica). Exit codes as for the other commands: 0 success, 1 the answer is "no" (no such key, no
master within ``--timeout``), 2 usage, 3 broker unreachable.
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

import anyio
import click

from ..endpoint.endpoint import Endpoint
from ..store.elected_attach import attach_store
from .common import (
    EXIT_CHECK_FAILED,
    broker_option,
    cli_endpoint,
    connection_options,
    fail,
    jsonable,
    namespace_option,
    need_broker,
    parse_value,
    run_command,
)

timeout_option = click.option("--timeout", type=float, default=15.0, show_default=True,
                              help="Seconds to wait for the store's master.")


def _key(value: Any) -> Any:
    return tuple(_key(v) for v in value) if isinstance(value, list) else value


@click.group()
def store() -> None:
    """Elected stores: read, write and watch from the command line."""


@store.command("get")
@broker_option
@connection_options
@namespace_option
@timeout_option
@click.argument("name")
@click.argument("key")
def store_get(broker: str | None, namespace: str, timeout: float, name: str, key: str) -> None:
    """Print the value of KEY (JSON, or a plain string) in store NAME, as JSON."""
    url = need_broker(broker, "get")

    async def run() -> tuple[bool, Any]:
        async with Endpoint(url, namespace=namespace, name="cli-store", **cli_endpoint(url)) as ep:
            s = await attach_store(ep, name, candidate=False)
            try:
                if not await s.await_master(timeout):
                    return False, f"no master of store {name!r} answered within {timeout} s"
                k = _key(parse_value(key, "KEY"))
                if not await s.exists(k):
                    return False, f"no such key in store {name!r}: {k!r}"
                return True, await s.get(k)
            finally:
                await s.close()

    ok, value = run_command(run)
    if not ok:
        fail(value, EXIT_CHECK_FAILED)
    click.echo(json.dumps(jsonable(value)))


@store.command("keys")
@broker_option
@connection_options
@namespace_option
@timeout_option
@click.argument("name")
def store_keys(broker: str | None, namespace: str, timeout: float, name: str) -> None:
    """Print the keys of store NAME, one JSON value per line."""
    url = need_broker(broker, "keys")

    async def run() -> list[Any] | None:
        async with Endpoint(url, namespace=namespace, name="cli-store", **cli_endpoint(url)) as ep:
            s = await attach_store(ep, name, candidate=False)
            try:
                return await s.keys() if await s.await_master(timeout) else None
            finally:
                await s.close()

    keys = run_command(run)
    if keys is None:
        fail(f"no master of store {name!r} answered within {timeout} s", EXIT_CHECK_FAILED)
    for k in keys:
        click.echo(json.dumps(jsonable(k)))


@store.command("put")
@broker_option
@connection_options
@namespace_option
@timeout_option
@click.option("--expiry", type=float, default=None, help="Seconds until the key expires.")
@click.argument("name")
@click.argument("key")
@click.argument("value")
def store_put(broker: str | None, namespace: str, timeout: float, expiry: float | None, name: str,
              key: str, value: str) -> None:
    """Set KEY to VALUE (each JSON, or a plain string) in store NAME; returns once durable."""
    url = need_broker(broker, "put")
    from ..store import StoreError, StoreWriter
    from ..store.commands import Put

    async def run() -> str | None:
        async with Endpoint(url, namespace=namespace, name="cli-store", **cli_endpoint(url)) as ep:
            async with StoreWriter(ep, name, f"cli-{uuid.uuid4().hex}", write_timeout=timeout) as writer:
                if not await writer.await_master(timeout):
                    return f"no master of store {name!r} answered within {timeout} s"
                try:
                    await writer.write(Put(_key(parse_value(key, "KEY")), parse_value(value, "VALUE"), expiry))
                except StoreError as exc:
                    return str(exc)
                return None

    error = run_command(run)
    if error is not None:
        fail(error, EXIT_CHECK_FAILED)


@store.command("watch")
@broker_option
@connection_options
@namespace_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--count", type=int, default=0, help="Stop after this many events (0: until Ctrl-C).")
@click.argument("name")
def store_watch(broker: str | None, namespace: str, as_json: bool, count: int, name: str) -> None:
    """Print changes of store NAME as they happen (and master changes, conflicts)."""
    url = need_broker(broker, "watch")

    async def run() -> None:
        async with Endpoint(url, namespace=namespace, name="cli-store", **cli_endpoint(url)) as ep:
            s = await attach_store(ep, name, candidate=False)
            seen = 0
            async with s.events() as events:
                async for event in events:
                    fields = {k: jsonable(getattr(event, k)) for k in event.__dataclass_fields__
                              if k not in ("store", "chosen", "other")}
                    kind = type(event).__name__
                    if as_json:
                        click.echo(json.dumps({"event": kind, **fields}))
                    else:
                        click.echo(f"{kind:12} " + " ".join(f"{k}={v}" for k, v in fields.items()))
                    sys.stdout.flush()
                    seen += 1
                    if count and seen >= count:
                        break
            await s.close()

    run_command(run)


@click.command()
@broker_option
@connection_options
@namespace_option
@click.option("--wait", type=float, default=1.0, show_default=True, help="Seconds to collect announcements.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def peers(broker: str | None, namespace: str, wait: float, as_json: bool) -> None:
    """List the endpoints announced on the broker (name, id, subscribed topic prefixes)."""
    if broker is None:
        fail("peers needs --broker (or BROKER_MQTT_URL)", 2)

    async def run() -> list[Any]:
        async with Endpoint(broker, namespace=namespace, name="cli-peers", **cli_endpoint(broker)) as ep:
            await anyio.sleep(wait)
            return ep.peers()

    for p in sorted(run_command(run), key=lambda p: p.name):
        if as_json:
            click.echo(json.dumps({"name": p.name, "id": str(p.id), "topics": list(p.topics)}))
        else:
            click.echo(f"{p.name:24} {p.id}  {' '.join(p.topics)}")
