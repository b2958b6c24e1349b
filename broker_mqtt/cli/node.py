"""``broker-mqtt node``: a long-lived node (an endpoint, its elected stores and work queues).

Configured by a TOML file, flags and the environment (flags win over the file; ``--broker`` also
reads ``BROKER_MQTT_URL``)::

    broker = "mqtt://broker.local:1883"
    namespace = "bm"
    name = "gw-1"
    client_id = "gw-1"          # under a broker ACL: the principal's name (docs/security.md)
    signing_key = "gw-1.key"    # optional: seal every PUBLISH (docs/signing.md) ...
    trust = "trust.toml"        # ... and drop what the trusted keys did not seal
    reconnect_max = 1.0         # cap of the reconnect backoff, seconds (or --reconnect-max)

    [[store]]
    name = "site-config"
    backend = "sqlite"          # or "memory"
    path = "site-config.db"
    resident = "memory"         # or "disk": the entries stay in the file (a store larger than memory)
    mode = "sticky"             # or "rotate"
    durability = "one"          # or "master", "all"
    election = { cycle = 2.0, gap = 0.5 }

    [[queue]]
    name = "jobs"
    backend = "sqlite"          # or "memory"; and max_deliveries, lease, mode, durability, election
    path = "jobs.db"

``--store NAME`` / ``--queue NAME`` (repeatable) add a memory store / queue with the default election. The node prints one line
per event worth knowing (connected, store master changes, conflicts, peers) and on SIGTERM or SIGINT
hands every store's mastership over, leaves cleanly and exits 0. When a store's SQLite file fails (a
full disk) that store stops (``StoreFailed``); the node then leaves the others the same way and exits
1, so that a supervisor restarts it once the disk has room.

``--metrics-port PORT`` (and ``--metrics-host``, default 127.0.0.1) serves Prometheus metrics at
``http://HOST:PORT/metrics`` (:mod:`broker_mqtt.metrics`; needs the ``metrics`` extra).
``--log-format json`` makes every log record, and the node's event lines, one JSON object per line
on stderr (:mod:`.logs`).
"""

from __future__ import annotations

import logging
import signal
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import click

from ..collector import tune_garbage_collector
from ..endpoint.attaching import Attaching, Closeable
from ..endpoint.backoff import DEFAULT_RECONNECT_DELAY
from ..endpoint.endpoint import Endpoint
from ..endpoint.events import MessagesMissed, PeerAdded, PeerLost, PeerRemoved
from ..errors import UsageError
from ..queue.attached import attach_queue
from ..store.elected_attach import attach_store
from ..store.errors import BackendError
from ..transport.keyfiles import load_private_key, load_trust_file
from ..wire.identity import validate_client_id
from .common import broker_option, cli_endpoint, connection_options, fail, run_command
from .logs import log_format, logging_options

_STORE_KEYS = {"name", "backend", "path", "mode", "durability", "election", "candidate", "write_timeout"}
_QUEUE_KEYS = _STORE_KEYS | {"max_deliveries", "lease"}

H = TypeVar("H", bound=Closeable)


def _load(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        with Path(path).open("rb") as f:
            config = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        fail(f"cannot read {path}: {exc}", 2)
    unknown = set(config) - {"broker", "namespace", "name", "store", "queue", "reconnect_max"}
    if unknown:
        fail(f"{path}: unknown settings {sorted(unknown)}", 2)
    for section, allowed in (("store", _STORE_KEYS), ("queue", _QUEUE_KEYS)):
        for entry in config.get(section, []):
            if not isinstance(entry, dict) or "name" not in entry:
                fail(f"{path}: every [[{section}]] needs a name", 2)
            bad = set(entry) - allowed
            if bad:
                fail(f"{path}: {section} {entry['name']!r} has unknown settings {sorted(bad)}", 2)
    return config


_log = logging.getLogger("broker_mqtt.node")
_log.setLevel(logging.INFO)  # the node's event lines: printed at any --log-level, as in text mode

METRICS_EXTRA = "--metrics-port needs the prometheus_client package: pip install 'broker-mqtt[metrics]'"


def _say(text: str) -> None:
    if log_format() == "json":
        _log.info(text)
    else:
        click.echo(f"{time.strftime('%H:%M:%S')} {text}", nl=True)


@click.command()
@broker_option
@connection_options
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="A TOML file (see below).")
@click.option("--namespace", default=None, help="Topic namespace (default: the file's, else bm).")
@click.option("--name", default=None, help="This node's name (default: the file's, else the host's).")
@click.option("--store", "stores", multiple=True, help="Join this elected store (memory backend); repeatable.")
@click.option("--queue", "queues", multiple=True, help="Join this work queue (memory backend); repeatable.")
@click.option("--reconnect-max", type=click.FloatRange(min=0.05), default=None, metavar="SECONDS",
              help="Cap of the reconnect backoff (default: the file's reconnect_max, else "
                   f"{DEFAULT_RECONNECT_DELAY[1]:g}); a node rejoins within ~1.5x this after a network heal.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port at /metrics (0: any free port; needs the "
              "metrics extra, prometheus_client).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="The address --metrics-port listens on.")
@logging_options
def node(broker: str | None, config_path: str | None, namespace: str | None, name: str | None,
         stores: tuple[str, ...], queues: tuple[str, ...], reconnect_max: float | None, metrics_port: int | None,
         metrics_host: str) -> None:
    """Run a long-lived node: an endpoint, its elected stores and work queues, until SIGTERM.

    Once connected, before it joins them, the node sets Python's garbage collector for its load
    (broker_mqtt.tune_garbage_collector: start-up objects frozen, collections less often)."""
    if metrics_port is not None:
        try:
            from .. import metrics
        except ImportError:
            fail(METRICS_EXTRA, 2)
    config = _load(config_path)
    url = broker or config.get("broker")
    if url is None:
        fail("node needs --broker, BROKER_MQTT_URL or `broker` in the config file", 2)
    store_specs = [dict(s) for s in config.get("store", [])] + [{"name": s} for s in stores]
    queue_specs = [dict(q) for q in config.get("queue", [])] + [{"name": q} for q in queues]
    if not store_specs and not queue_specs:
        fail("node needs at least one store or queue (--store NAME, --queue NAME, or [[store]] / [[queue]] "
              "in the config file)", 2)

    options = cli_endpoint(url)
    loaders: dict[str, Callable[[str], Any]] = {"client_id": validate_client_id, "signing_key": load_private_key,
                                                "trust": load_trust_file}
    for key, load in loaders.items():
        if key not in options and key in config:
            try:
                options[key] = load(str(config[key]))
            except UsageError as exc:
                fail(f"{key}: {exc}", 2)

    cap = reconnect_max if reconnect_max is not None else config.get("reconnect_max", DEFAULT_RECONNECT_DELAY[1])
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap < 0.05:
        fail(f"reconnect_max must be a number of seconds >= 0.05, not {cap!r}", 2)
    options["reconnect_delay"] = (min(DEFAULT_RECONNECT_DELAY[0], cap), cap)

    failed: list[str] = []  # the stores that stopped because their file failed

    async def run() -> None:
        listener = None
        if metrics_port is not None:
            try:
                listener, port = await metrics.open_metrics_listener(metrics_host, metrics_port)
            except OSError as exc:
                fail(f"--metrics-port: cannot listen on {metrics_host}:{metrics_port}: {exc}", 2)
        async with Endpoint(url, namespace=namespace or config.get("namespace", "bm"), **options,
                            name=name or config.get("name")) as ep:
            _say(f"node {ep.name} ({ep.id}) connected to {url}")
            tune_garbage_collector()  # before the joins, whose snapshots it speeds too: see broker_mqtt.collector

            async def join(what: str, spec: dict[str, Any], attach: Callable[..., Attaching[H]]) -> H:
                item = spec.pop("name")
                try:
                    handle = await attach(ep, item, **spec)
                except (TypeError, ValueError) as exc:
                    fail(f"{what} {item!r}: {exc}", 2)
                except BackendError as exc:  # its SQLite file cannot be opened or is not a store's
                    fail(f"{what} {item!r}: {exc}", 1)
                _say(f"joined {what} {item}")
                return handle

            handles = [await join("store", spec, attach_store) for spec in store_specs]
            queue_handles = [await join("queue", spec, attach_queue) for spec in queue_specs]
            leave = anyio.Event()  # a signal, or a store that stopped (StoreFailed): the node exits 1
            async with anyio.create_task_group() as tg:
                if listener is not None:
                    registry, _ = metrics.node_registry(ep, handles, queue_handles)
                    tg.start_soon(metrics.serve_metrics, registry, listener)
                    _say(f"metrics on http://{metrics_host}:{port}/metrics")
                for h in handles:
                    tg.start_soon(_watch_store, h, failed, leave)
                for q in queue_handles:
                    tg.start_soon(_watch_store, q.store, failed, leave)  # the queue's store: queue-<name>
                tg.start_soon(_watch_peers, ep)
                tg.start_soon(_watch_signals, leave)
                await leave.wait()
                for h in handles:
                    await h.close()
                for q in queue_handles:
                    await q.close()
                tg.cancel_scope.cancel()
            _say("left")
        if failed:  # a supervisor restarts the node once the disk has room
            fail("; ".join(failed), 1)

    run_command(run)


async def _watch_signals(leave: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for sig in signals:
            _say(f"{signal.Signals(sig).name}: handing over and leaving")
            leave.set()
            return


async def _watch_store(store: Any, failed: list[str], leave: anyio.Event) -> None:
    from ..store import ConflictResolved, MasterChanged, StoreFailed

    async with store.events(data=False) as events:
        async for e in events:
            if isinstance(e, StoreFailed):
                failed.append(f"store {store.name} stopped: {e.error}")
                _say(f"store {store.name}: stopped, its state cannot be stored: {e.error}; leaving")
                leave.set()
            elif isinstance(e, MasterChanged):
                who = "this node" if e.master == store.node_id else e.master
                _say(f"store {store.name}: master {who or 'none (electing)'}"
                     + (f", epoch {e.epoch[0]}" if e.epoch else ""))
            elif isinstance(e, ConflictResolved):
                _say(f"store {store.name}: conflict on {e.key!r}: kept {e.chosen.value!r}, "
                     f"dropped {e.other.value!r}")


async def _watch_peers(ep: Endpoint) -> None:
    async with ep.status() as events:
        async for e in events:
            if isinstance(e, (PeerAdded, PeerLost, PeerRemoved)):
                _say(f"{type(e).__name__} {e.peer.name} {e.peer.id}")
            elif isinstance(e, MessagesMissed):  # counted in broker_mqtt_endpoint_messages_missed_total
                _say(f"missed {e.missed} message(s) of {e.sender} on {e.topic}")
