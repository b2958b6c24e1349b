"""``broker-mqtt queue ...``: replicated work queues from the command line (docs/queues.md).

``queue publish`` and ``queue consume`` use a handle that keeps no replica (``replica=False``): they
need the queue's nodes (``broker-mqtt node --queue NAME``, or applications that attach it) to be
running. ``queue dead-letters`` keeps a replica that never becomes master (``candidate=False``) for
the duration of the command. Exit codes as for the other commands: 0 success, 1 no master of the
queue within ``--timeout`` (or a write failed), 2 usage, 3 broker unreachable.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ..endpoint.endpoint import Endpoint
from ..queue.attached import attach_queue
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
                              help="Seconds to wait for the queue's master.")


def _no_master(name: str, timeout: float) -> str:
    return (f"no master of queue {name!r} answered within {timeout} s "
            f"(is a node attached to it? `broker-mqtt node --queue {name}`)")


@click.group()
def queue() -> None:
    """Work queues: publish, consume and read the dead-letter queue."""


@queue.command("publish")
@broker_option
@connection_options
@namespace_option
@timeout_option
@click.argument("name")
@click.argument("values", nargs=-1, required=True)
def queue_publish(broker: str | None, namespace: str, timeout: float, name: str, values: tuple[str, ...]) -> None:
    """Append VALUES (each JSON, or a plain string) to queue NAME in one write; print their ids."""
    url = need_broker(broker, "publish", "queue")
    from ..store.errors import StoreError

    async def run() -> tuple[bool, Any]:
        async with Endpoint(url, namespace=namespace, name="cli-queue", **cli_endpoint(url)) as ep:
            q = await attach_queue(ep, name, replica=False, write_timeout=timeout)
            try:
                if not await q.await_master(timeout):
                    return False, _no_master(name, timeout)
                return True, await q.publish_many([parse_value(v, "VALUE") for v in values])
            except StoreError as exc:
                return False, str(exc)
            finally:
                await q.close()

    ok, result = run_command(run)
    if not ok:
        fail(result, EXIT_CHECK_FAILED)
    for msg_id in result:
        click.echo(msg_id)


@queue.command("consume")
@broker_option
@connection_options
@namespace_option
@timeout_option
@click.option("--count", type=int, default=0, help="Stop after this many messages (0: until Ctrl-C).")
@click.option("--prefetch", type=int, default=1, show_default=True, help="Messages held at a time.")
@click.option("--settle", type=click.Choice(["accept", "release", "reject"]), default="accept",
              show_default=True, help="What to do with each message once printed.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.argument("name")
def queue_consume(broker: str | None, namespace: str, timeout: float, count: int, prefetch: int, settle: str,
                  as_json: bool, name: str) -> None:
    """Print messages of queue NAME as they are delivered, and accept (or release, reject) each."""
    url = need_broker(broker, "consume", "queue")
    if prefetch < 1:
        fail("--prefetch must be at least 1", 2)

    async def run() -> str | None:
        async with Endpoint(url, namespace=namespace, name="cli-queue", **cli_endpoint(url)) as ep:
            q = await attach_queue(ep, name, replica=False, write_timeout=timeout)
            try:
                if not await q.await_master(timeout):
                    return _no_master(name, timeout)
                seen = 0
                async with q.consume(prefetch=prefetch) as deliveries:
                    async for d in deliveries:
                        if as_json:
                            click.echo(json.dumps({"id": d.id, "delivery_count": d.delivery_count,
                                                   "data": jsonable(d.data)}))
                        else:
                            click.echo(f"{d.id:8}  delivery {d.delivery_count}  {jsonable(d.data)}")
                        sys.stdout.flush()
                        if settle == "accept":
                            await d.accept()
                        elif settle == "release":
                            await d.release()
                        else:
                            await d.reject("rejected with broker-mqtt queue consume --settle reject")
                        seen += 1
                        if count and seen >= count:
                            break
                return None
            finally:
                await q.close()

    error = run_command(run)
    if error is not None:
        fail(error, EXIT_CHECK_FAILED)


@queue.command("dead-letters")
@broker_option
@connection_options
@namespace_option
@timeout_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.argument("name")
def queue_dead_letters(broker: str | None, namespace: str, timeout: float, as_json: bool, name: str) -> None:
    """Print the dead-letter queue of queue NAME (id, deliveries, reason, data)."""
    url = need_broker(broker, "dead-letters", "queue")

    async def run() -> tuple[bool, Any]:
        async with Endpoint(url, namespace=namespace, name="cli-queue", **cli_endpoint(url)) as ep:
            q = await attach_queue(ep, name, candidate=False)
            assert q.store is not None  # a replica (the default) has the queue's store
            try:
                if not await q.await_master(timeout) or not await q.store.await_idle(timeout):
                    return False, _no_master(name, timeout)
                return True, q.dead_letters()
            finally:
                await q.close()

    ok, result = run_command(run)
    if not ok:
        fail(result, EXIT_CHECK_FAILED)
    for dead in result:
        if as_json:
            click.echo(json.dumps({"id": dead.id, "delivery_count": dead.delivery_count, "reason": dead.reason,
                                   "data": jsonable(dead.data)}))
        else:
            click.echo(f"{dead.id:8}  deliveries {dead.delivery_count}  {dead.reason}  {jsonable(dead.data)}")
