"""The ``broker-mqtt`` command line.

Exit codes: 0 success; 1 the command ran but its check failed (e.g. the demo did not see what it
expected); 2 usage errors (click's own); 3 the broker is unreachable or refused us.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from typing import Any

import anyio
import click

from . import __version__
from .embedded import EmbeddedBroker
from .endpoint import Endpoint
from .errors import BrokerUnavailable, MosquittoNotFound, UsageError
from .events import ConnectionLost, ConnectionRestored, ErrorEvent, PeerAdded, PeerLost, PeerRemoved
from .topics import validate_prefix, validate_topic

EXIT_CHECK_FAILED = 1
EXIT_UNREACHABLE = 3
DEMO_ELECTION = {"cycle": 2.0, "gap": 0.5}  # a dead master is replaced within about cycle + gap

broker_option = click.option(
    "--broker",
    envvar="BROKER_MQTT_URL",
    default=None,
    help="Broker URL, mqtt://[user:password@]host:port or mqtts://... (env BROKER_MQTT_URL). "
    "Default: an embedded mosquitto.",
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


# -- demo ---------------------------------------------------------------------------------------
@main.command(hidden=True, name="demo-node")
@click.option("--broker", required=True)
@click.option("--namespace", required=True)
@click.option("--name", required=True)
@click.option("--id", "node_id", required=True)
@click.option("--rate", type=float, default=20.0)
def demo_node(broker: str, namespace: str, name: str, node_id: str, rate: float) -> None:
    """One demo node: publishes a counter on /demo/<name>, counts what it hears on /demo, and writes
    into the elected store "demo" (push i onto log-<name>), reporting the last acknowledged i."""

    async def run() -> None:
        async with Endpoint(broker, namespace=namespace, name=name, id=uuid.UUID(node_id)) as ep:
            store = await ep.attach_store("demo", election=DEMO_ELECTION)
            async with ep.subscribe("/demo") as s, anyio.create_task_group() as tg:
                heard = Counter[str]()
                acked = -1

                async def listen() -> None:
                    async for msg in s:
                        heard[msg.data["from"]] += 1

                async def talk() -> None:
                    seq = 0
                    while True:
                        await ep.publish(f"/demo/{name}", {"from": name, "seq": seq, "heard": dict(heard),
                                                           "acked": acked})
                        seq += 1
                        await anyio.sleep(1 / rate)

                async def write() -> None:
                    nonlocal acked
                    await store.await_master()
                    for i in itertools.count():
                        await store.push(f"log-{name}", i)  # returns once durable: "acknowledged"
                        acked = i
                        await anyio.sleep(1 / rate)

                tg.start_soon(listen)
                tg.start_soon(talk)
                tg.start_soon(write)
                print("READY", flush=True)
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        tg.cancel_scope.cancel()
                        break
            await store.close()  # hands mastership over at once

    anyio.run(run)


class _Demo:
    """Runs the demo: an observer endpoint in this process, nodes as child processes."""

    def __init__(self, url: str, namespace: str, nodes: int, duration: float, live: bool) -> None:
        self.url, self.namespace, self.n_nodes, self.duration, self.live = url, namespace, nodes, duration, live
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.ids: dict[str, uuid.UUID] = {}
        self.events: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self.last_seq: dict[str, int] = {}
        self.acked: dict[str, int] = {}
        self.masters: list[tuple[float, str | None, int | None]] = []  # (time, master name, term)
        self.store: Any = None
        self.start = time.monotonic()

    def say(self, text: str) -> None:
        stamp = f"{time.monotonic() - self.start:6.2f}s"
        click.echo(f"[{stamp}] {text}")

    def spawn(self, name: str) -> None:
        node_id = uuid.uuid4()
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker_mqtt", "demo-node", "--broker", self.url, "--namespace",
             self.namespace, "--name", name, "--id", str(node_id)],
            stdout=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "READY":
            raise click.ClickException(f"demo node {name} did not start")
        self.procs[name], self.ids[name] = proc, node_id

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.stdout.close()

    def name_of(self, node: str | None) -> str | None:
        """The demo name of a store node id (``<endpoint uuid hex>.<incarnation>``)."""
        if node is None:
            return None
        return next((n for n, i in self.ids.items() if i.hex == node[:32]), "observer")

    async def run(self) -> bool:
        names = [f"node-{i + 1}" for i in range(self.n_nodes)]
        async with Endpoint(self.url, namespace=self.namespace, name="observer") as ep:
            self.say(f"observer {ep.id} connected to {self.url}")
            # the observer keeps a replica of the store but never becomes its master
            self.store = await ep.attach_store("demo", election=DEMO_ELECTION, candidate=False)
            async with ep.status() as status, ep.subscribe("/demo") as s, self.store.events() as store_events, \
                    anyio.create_task_group() as tg:
                tg.start_soon(self._watch_status, status, {v: k for k, v in self.ids.items()})
                tg.start_soon(self._watch_store, store_events)
                tg.start_soon(self._count, s)
                for name in names:
                    await anyio.to_thread.run_sync(self.spawn, name)
                    self.say(f"started {name} (pid {self.procs[name].pid})")
                tg.start_soon(self._report_rates)
                with anyio.move_on_after(max(self.duration / 2, 10)):
                    await self.store.await_master()
                await anyio.sleep(self.duration / 2)
                victim = self.name_of(self.store.master) or names[-1]
                self.killed_at = time.monotonic()
                self.say(f"killing {victim}, the store's master, with SIGKILL (pid {self.procs[victim].pid}): "
                         "expect PeerLost and a new master")
                self.procs[victim].kill()
                with anyio.move_on_after(15):  # the election replaces it within about cycle + gap
                    while self.name_of(self.store.master) in (None, victim):
                        await anyio.sleep(0.1)
                await anyio.sleep(self.duration / 2)
                self.say("stopping the other nodes with SIGTERM: expect PeerRemoved")
                await anyio.to_thread.run_sync(self.stop_all)
                await anyio.sleep(0.5)
                tg.cancel_scope.cancel()
            contents = dict(self.store.items())
            await self.store.close()
        return self.summary(names, victim, contents)

    async def _watch_store(self, events: Any) -> None:
        from .store import MasterChange

        async for event in events:
            if isinstance(event, MasterChange) and event.master is not None:
                name = self.name_of(event.master)
                term = event.epoch[0] if event.epoch else None
                self.masters.append((time.monotonic(), name, term))
                after = ""
                if getattr(self, "killed_at", None) is not None:
                    after = f", {time.monotonic() - self.killed_at:.2f} s after the kill"
                    self.killed_at = None
                self.say(f"store master is now {name} (epoch {term}){after}")

    async def _watch_status(self, status: Any, names_by_id: dict[uuid.UUID, str]) -> None:
        async for event in status:
            match event:
                case PeerAdded(peer) | PeerLost(peer) | PeerRemoved(peer):
                    self.events[type(event).__name__] += 1
                    self.say(f"{type(event).__name__:12} {peer.name} {peer.id}")
                case ConnectionLost() | ConnectionRestored():
                    self.say(f"{type(event).__name__}")
                case ErrorEvent(code, message):
                    self.events["ErrorEvent"] += 1
                    self.say(f"ErrorEvent {code.value}: {message}")

    async def _count(self, s: Any) -> None:
        async for msg in s:
            sender = msg.data["from"]
            self.received[sender] += 1
            self.last_seq[sender] = msg.data["seq"]
            self.acked[sender] = max(self.acked.get(sender, -1), msg.data.get("acked", -1))

    async def _report_rates(self) -> None:
        previous = 0
        while True:
            await anyio.sleep(1)
            total = sum(self.received.values())
            master = self.name_of(self.store.master) if self.store is not None else None
            keys = len(self.store) if self.store is not None else 0
            writes = sum(len(v) for k, v in self.store.items() if isinstance(v, list)) if self.store else 0
            self.say(f"messages/s {total - previous:5}   total {total:6}   peers alive "
                     f"{sum(1 for p in self.procs.values() if p.poll() is None)}   master {master or '-':7} "
                     f"store keys {keys}  writes {writes}")
            previous = total

    def summary(self, names: list[str], victim: str, contents: dict[Any, Any]) -> bool:
        click.echo("\nsummary")
        kept = True
        for name in names:
            got, seq = self.received[name], self.last_seq.get(name, -1)
            log = contents.get(f"log-{name}", [])
            acked = self.acked.get(name, -1)
            whole = log[:acked + 1] == list(range(acked + 1)) and len(log) == len(set(log))
            kept = kept and whole and acked >= 0
            click.echo(f"  {name:8} messages received {got:6}  last seq {seq:6}  store writes acknowledged "
                       f"{acked + 1:4}, in the store {len(log):4} {'(all kept, none twice)' if whole else '(MISSING)'}"
                       f"  {'(killed)' if name == victim else ''}")
        terms = [t for _, _, t in self.masters]
        click.echo(f"  store masters: {' -> '.join(f'{n} (epoch {t})' for _, n, t in self.masters) or 'none'}")
        click.echo(f"  peer events: {dict(self.events)}")
        ok = (
            self.events["PeerAdded"] == len(names)
            and self.events["PeerLost"] == 1
            and self.events["PeerRemoved"] == len(names) - 1
            and all(self.received[n] > 0 for n in names)
            and all(self.received[n] == self.last_seq[n] + 1 for n in names)  # none lost, none doubled
            and kept
            and len(set(terms)) >= 2 and self.masters[-1][1] != victim  # the master moved on the kill
        )
        click.echo(f"  result: {'OK' if ok else 'UNEXPECTED'} (every node seen, one lost, the rest "
                   f"removed, every message received once and in order, the store's master replaced "
                   f"after the kill, every acknowledged store write kept once)")
        return ok


@main.command()
@broker_option
@click.option("--duration", type=float, default=12.0, show_default=True, help="Seconds to run.")
@click.option("--nodes", type=click.IntRange(2, 8), default=3, show_default=True, help="Node processes.")
def demo(broker: str | None, duration: float, nodes: int) -> None:
    """A live demo: an embedded broker, node processes writing into an elected store, peer events;
    mid-way the store's master is killed, another node takes over, and nothing acknowledged is lost."""
    live = sys.stdout.isatty()
    namespace = "demo" + uuid.uuid4().hex[:6]

    async def run() -> bool:
        if broker is not None:
            return await _Demo(broker, namespace, nodes, duration, live).run()
        async with EmbeddedBroker() as embedded:
            click.echo(f"embedded mosquitto on {embedded.url} (pid {embedded.pid})")
            return await _Demo(embedded.url, namespace, nodes, duration, live).run()

    if not _run(run):
        sys.exit(EXIT_CHECK_FAILED)


from . import cli_bench, cli_node, cli_store  # noqa: E402, F401 - register `bench`, `node`, `store`, `peers`

if __name__ == "__main__":  # pragma: no cover
    main()
