"""``broker-mqtt demo``: the whole system live, on an embedded broker.

Theory of operation. This process runs an *observer* endpoint that keeps a replica of the elected
store ``demo`` but never becomes its master (``candidate=False``), and starts the node processes
(the hidden command ``demo-node``): each publishes a counter on ``/demo/<name>`` and pushes
0, 1, 2, ... onto ``log-<name>`` in the store, reporting in its messages the last push the store
acknowledged. When pyspark can run here it also starts the Spark job (:mod:`.demo_spark`), at once,
in parallel, since Spark takes 10-20 s to come up; the job puts aggregates into the same store
through the bridge. Once a master is elected and ``--duration``/2 has passed, the master is killed
with SIGKILL; another node takes over; after another ``--duration``/2 (and, if still running, the
end of the Spark job) the other nodes get SIGTERM. The summary checks the peer events, that every
message arrived once and in order, that the master moved, that every acknowledged push is in the
store exactly once and that the Spark job's rows are there with the expected values.

On a terminal the demo shows a live view (:mod:`.demo_view`) redrawn twice a second and prints its
log when it ends; otherwise (CI, tests, a pipe) it prints the log lines as they happen.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, deque
from typing import Any

import anyio
import click

from ..endpoint.endpoint import Endpoint
from ..endpoint.events import (
    ConnectionLost,
    ConnectionRestored,
    ErrorEvent,
    PeerAdded,
    PeerLost,
    PeerRemoved,
)
from ..store.elected_attach import attach_store
from ..transport.embedded import EmbeddedBroker
from .common import EXIT_CHECK_FAILED, broker_option, run_command
from .demo_spark import GROUPS, KEY_PREFIX, ROWS, expected_aggregates, parse_line, run_job, spark_unavailable
from .demo_view import PeerRow, Screen, Snapshot, StoreRow, render

DEMO_ELECTION = {"cycle": 2.0, "gap": 0.5}  # a dead master is replaced within about cycle + gap
STORE = "demo"
SPARK_WAIT = 90.0  # seconds the demo waits, at the end, for a Spark job still running


@click.command(hidden=True, name="demo-node")
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
            store = await attach_store(ep, STORE, election=DEMO_ELECTION)
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


@click.command(hidden=True, name="demo-spark")
@click.option("--broker", required=True)
@click.option("--namespace", required=True)
@click.option("--store", required=True)
def demo_spark(broker: str, namespace: str, store: str) -> None:
    """The demo's Spark job (broker_mqtt.cli.demo_spark); run by ``broker-mqtt demo``."""
    run_job(broker, namespace, store)


class _Spark:
    """The Spark job's progress, as the demo reports it."""

    def __init__(self, skipped: str | None) -> None:
        self.skipped = skipped  # why it does not run, or None
        self.state = f"skipped: {skipped}" if skipped else "not started"
        self.proc: Any = None
        self.started: float | None = None  # time.monotonic() when the job started
        self.wrote: int | None = None
        self.error: str | None = None
        self.done = anyio.Event()


class _Demo:
    """Runs the demo: an observer endpoint in this process, nodes (and the Spark job) as child processes."""

    def __init__(self, url: str, namespace: str, nodes: int, duration: float, live: bool,
                 spark_skipped: str | None) -> None:
        self.url, self.namespace, self.n_nodes, self.duration, self.live = url, namespace, nodes, duration, live
        self.names = [f"node-{i + 1}" for i in range(nodes)]
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.ids: dict[str, uuid.UUID] = {}
        self.events: Counter[str] = Counter()  # peer events of the demo nodes
        self.peer_state: dict[str, str] = {}
        self.others: set[uuid.UUID] = set()  # other endpoints now present (Spark tasks, a `status` call)
        self.received: Counter[str] = Counter()
        self.last_seq: dict[str, int] = {}
        self.acked: dict[str, int] = {}
        self.masters: list[tuple[float, str | None, int | None]] = []  # (time, master name, term)
        self.store: Any = None
        self.spark = _Spark(spark_skipped)
        self.phase = "starting"
        self.rate = 0
        self.log: list[str] = []
        self.recent: deque[str] = deque(maxlen=50)
        self.killed_at: float | None = None
        self.start = time.monotonic()

    # -- output ---------------------------------------------------------------------------------------

    def say(self, text: str, *, quiet: bool = False) -> None:
        """A log line: printed at once when not live; on a terminal shown in the view (and, unless
        ``quiet``, printed after it)."""
        line = f"[{time.monotonic() - self.start:6.2f}s] {text}"
        if not self.live:
            click.echo(line)
            return
        self.recent.append(line)
        if not quiet:
            self.log.append(line)

    def snapshot(self) -> Snapshot:
        store = self.store
        items = store.items_nowait() if store is not None else []
        master = self.name_of(store.master) if store is not None else None
        term = store.epoch[0] if store is not None and store.epoch and master is not None else None
        row = StoreRow(STORE, master, term, len(items),
                       sum(len(v) for k, v in items if isinstance(v, list)),
                       sum(1 for k, _ in items if isinstance(k, str) and k.startswith(KEY_PREFIX)),
                       bool(store is not None and store.stale and master is not None),
                       self.phase not in ("stopping the other nodes", "done"))
        peers = tuple(
            PeerRow(name, self.peer_state.get(name, "starting" if name in self.procs else "waiting"),
                    self.procs[name].pid if name in self.procs else None, self.received[name],
                    self.acked.get(name, -1) + 1)
            for name in self.names)
        return Snapshot(self.url, self.namespace, time.monotonic() - self.start, self.duration, self.phase,
                        self.rate, sum(self.received.values()), (row,), peers, len(self.others),
                        self._spark_state(), tuple(self.recent))

    def _spark_state(self) -> str:
        spark = self.spark
        if spark.started is None or spark.done.is_set() or spark.wrote is not None or spark.error is not None:
            return spark.state
        return f"{spark.state}   [{time.monotonic() - spark.started:.0f} s]"

    async def _refresh(self, screen: Screen) -> None:
        while True:
            size = shutil.get_terminal_size()
            screen.draw(render(self.snapshot(), size.columns - 1, size.lines - 1))
            await anyio.sleep(0.5)

    # -- processes ------------------------------------------------------------------------------------

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

    # -- the run ----------------------------------------------------------------------------------------

    async def run(self) -> bool:
        names = self.names
        screen = Screen(sys.stdout) if self.live else None
        try:
            async with Endpoint(self.url, namespace=self.namespace, name="observer") as ep:
                self.say(f"observer {ep.id} connected to {self.url}")
                # the observer keeps a replica of the store but never becomes its master
                self.store = await attach_store(ep, STORE, election=DEMO_ELECTION, candidate=False)
                async with ep.status() as status, ep.subscribe("/demo") as s, \
                        self.store.events() as store_events, anyio.create_task_group() as tg:
                    tg.start_soon(self._watch_status, status)
                    tg.start_soon(self._watch_store, store_events)
                    tg.start_soon(self._count, s)
                    if screen is not None:
                        tg.start_soon(self._refresh, screen)
                        tg.start_soon(self._report_rates)  # (the log's rate lines start with the nodes)
                    if self.spark.skipped is None:
                        tg.start_soon(self._run_spark)
                    else:
                        self.say(f"spark: skipped ({self.spark.skipped})")
                    self.phase = "starting the node processes"
                    for name in names:
                        await anyio.to_thread.run_sync(self.spawn, name)
                        self.say(f"started {name} (pid {self.procs[name].pid})")
                    if screen is None:
                        tg.start_soon(self._report_rates)
                    self.phase = "electing the store's master"
                    with anyio.move_on_after(max(self.duration / 2, 10)):
                        await self.store.await_master()
                    self.phase = f"nodes writing into store {STORE!r} through its master"
                    await anyio.sleep(self.duration / 2)
                    victim = self.name_of(self.store.master) or names[-1]
                    self.killed_at = time.monotonic()
                    self.say(f"killing {victim}, the store's master, with SIGKILL (pid {self.procs[victim].pid}): "
                             "expect PeerLost and a new master")
                    self.peer_state[victim] = "killed"
                    self.phase = f"{victim} (the master) killed: the election picks another node"
                    self.procs[victim].kill()
                    with anyio.move_on_after(15):  # the election replaces it within about cycle + gap
                        while self.name_of(self.store.master) in (None, victim):
                            await anyio.sleep(0.1)
                    self.phase = f"writing through the new master {self.name_of(self.store.master)}"
                    await anyio.sleep(self.duration / 2)
                    if self.spark.skipped is None and not self.spark.done.is_set():
                        self.phase = "waiting for the Spark job to finish"
                        self.say(f"waiting for the Spark job to finish (at most {SPARK_WAIT:g} s)")
                        with anyio.move_on_after(SPARK_WAIT):
                            await self.spark.done.wait()
                        if not self.spark.done.is_set():
                            self.spark.error = f"did not finish within {SPARK_WAIT:g} s"
                            self.say(f"spark: job {self.spark.error}; stopping it")
                    self.phase = "stopping the other nodes"
                    self.say("stopping the other nodes with SIGTERM: expect PeerRemoved")
                    await anyio.to_thread.run_sync(self.stop_all)
                    await anyio.sleep(0.5)
                    self.phase = "done"
                    tg.cancel_scope.cancel()
                contents = dict(await self.store.items())
                await self.store.close()
        finally:
            if screen is not None:
                screen.close()
                for line in render(self.snapshot(), 10_000, 10_000, with_events=False):
                    click.echo(line)  # the last frame, without its events: the whole log follows
                click.echo("")
                for line in self.log:
                    click.echo(line)
        return self.summary(names, victim, contents)

    async def _run_spark(self) -> None:
        """The Spark job as a child process (:mod:`.demo_spark`); its report lines become log lines."""
        spark = self.spark
        cmd = [sys.executable, "-m", "broker_mqtt", "demo-spark", "--broker", self.url, "--namespace",
               self.namespace, "--store", STORE]
        with tempfile.TemporaryFile("w+") as errors:
            try:
                async with await anyio.open_process(cmd, stdout=subprocess.PIPE, stderr=errors,
                                                    start_new_session=True) as proc:
                    spark.proc, spark.started = proc, time.monotonic()
                    spark.state = f"starting a local Spark session (pid {proc.pid})"
                    self.say(f"spark: starting a local Spark session (pid {proc.pid}); the job will put "
                             f"{GROUPS} aggregates of {ROWS} readings into store {STORE!r} through the bridge")
                    assert proc.stdout is not None
                    pending = b""
                    async for chunk in proc.stdout:
                        pending += chunk
                        *lines, pending = pending.split(b"\n")
                        for raw in lines:
                            self._spark_line(raw.decode(errors="replace"))
                    code = await proc.wait()
            finally:
                if spark.proc is not None and spark.proc.returncode is None:
                    with anyio.CancelScope(shield=True):
                        await self._stop_spark(spark.proc)
                spark.done.set()
            if code != 0 and spark.error is None:
                errors.seek(0)
                tail = [line for line in errors.read().splitlines() if line.strip()][-3:]
                spark.error = f"exit code {code}" + (f": {' | '.join(tail)}" if tail else "")
                spark.state = f"failed: {spark.error}"
                self.say(f"spark: job failed ({spark.error})")

    @staticmethod
    async def _stop_spark(proc: Any) -> None:
        """SIGTERM to the job's process group (driver, JVM, Python workers), SIGKILL after 5 s."""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            with anyio.move_on_after(wait):
                await proc.wait()
                return

    def _spark_line(self, line: str) -> None:
        parsed = parse_line(line)
        if parsed is None:
            return
        kind, args = parsed
        spark = self.spark
        if kind == "session":
            spark.state = f"session up after {args[0]} s; writing {GROUPS} aggregates into store {STORE!r}"
            self.say(f"spark: session up after {args[0]} s; writing the aggregates through the bridge")
        elif kind == "wrote":
            spark.wrote = int(args[0].split()[0])
            seconds = args[0].split()[1] if len(args[0].split()) > 1 else "?"
            spark.state = f"done: {spark.wrote} rows put into store {STORE!r}, acknowledged ({seconds} s)"
            self.say(f"spark: job done, {spark.wrote} rows put into store {STORE!r} and acknowledged "
                     f"({seconds} s after its start)")
        elif kind == "error":
            spark.error = args[0] if args else "unknown error"
            spark.state = f"failed: {spark.error}"
            self.say(f"spark: job failed: {spark.error}")

    async def _watch_store(self, events: Any) -> None:
        from ..store import MasterChanged

        async for event in events:
            if isinstance(event, MasterChanged) and event.master is not None:
                name = self.name_of(event.master)
                term = event.epoch[0] if event.epoch else None
                self.masters.append((time.monotonic(), name, term))
                after = ""
                if self.killed_at is not None:
                    after = f", {time.monotonic() - self.killed_at:.2f} s after the kill"
                    self.killed_at = None
                self.say(f"store master is now {name} (epoch {term}){after}")

    async def _watch_status(self, status: Any) -> None:
        async for event in status:
            match event:
                case PeerAdded(peer) | PeerLost(peer) | PeerRemoved(peer):
                    kind = type(event).__name__
                    if peer.name in self.names:
                        self.events[kind] += 1
                        self.peer_state[peer.name] = {"PeerAdded": "up", "PeerLost": "lost",
                                                      "PeerRemoved": "removed"}[kind]
                        self.say(f"{kind:12} {peer.name} {peer.id}")
                    else:  # the Spark job's tasks, a `broker-mqtt status` from another terminal
                        if kind == "PeerAdded":
                            self.others.add(peer.id)
                        else:
                            self.others.discard(peer.id)
                        self.say(f"{kind:12} {peer.name} {peer.id}", quiet=True)
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
            self.rate = total - previous
            previous = total
            if self.live:
                continue  # the view shows it
            master = self.name_of(self.store.master) if self.store is not None else None
            keys = len(self.store) if self.store is not None else 0
            writes = sum(len(v) for k, v in await self.store.items() if isinstance(v, list)) if self.store else 0
            self.say(f"messages/s {self.rate:5}   total {total:6}   peers alive "
                     f"{sum(1 for p in self.procs.values() if p.poll() is None)}   master {master or '-':7} "
                     f"store keys {keys}  writes {writes}")

    # -- the verdict ------------------------------------------------------------------------------------

    def spark_check(self, contents: dict[Any, Any]) -> tuple[bool | None, str]:
        """(None: not run; True/False: the job's rows are (not) all in the store as expected, a line)."""
        spark = self.spark
        if spark.skipped is not None:
            return None, f"skipped ({spark.skipped})"
        expected = expected_aggregates()
        got = {k: v for k, v in contents.items() if isinstance(k, str) and k.startswith(KEY_PREFIX)}
        ok = spark.error is None and spark.wrote == len(expected) and got == expected
        detail = f"failed: {spark.error}; " if spark.error else ""
        return ok, (f"{detail}{spark.wrote or 0} of {len(expected)} aggregates of {ROWS} readings written "
                    f"through the bridge; in the store {len(got)}, "
                    f"{'values as computed' if got == expected else 'NOT as computed'}")

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
        spark_ok, spark_line = self.spark_check(contents)
        click.echo(f"  spark job: {spark_line}")
        ok = (
            self.events["PeerAdded"] == len(names)
            and self.events["PeerLost"] == 1
            and self.events["PeerRemoved"] == len(names) - 1
            and all(self.received[n] > 0 for n in names)
            and all(self.received[n] == self.last_seq[n] + 1 for n in names)  # none lost, none doubled
            and kept
            and len(set(terms)) >= 2 and self.masters[-1][1] != victim  # the master moved on the kill
            and spark_ok is not False
        )
        spark_claim = ", the Spark job's rows all in the store once" if spark_ok else ""
        click.echo(f"  result: {'OK' if ok else 'UNEXPECTED'} (every node seen, one lost, the rest "
                   f"removed, every message received once and in order, the store's master replaced "
                   f"after the kill, every acknowledged store write kept once{spark_claim})")
        return ok


@click.command()
@broker_option
@click.option("--duration", type=float, default=12.0, show_default=True,
              help="Seconds the nodes run (half before the kill, half after); the Spark job may extend it.")
@click.option("--nodes", type=click.IntRange(2, 8), default=3, show_default=True, help="Node processes.")
@click.option("--no-spark", is_flag=True, help="Do not run the Spark job (it runs when pyspark and java are here).")
def demo(broker: str | None, duration: float, nodes: int, no_spark: bool) -> None:
    """A live demo: an embedded broker, node processes writing into an elected store, a Spark job
    writing into it through the bridge, peer events; mid-way the store's master is killed, another
    node takes over, and nothing acknowledged is lost. A live view on a terminal, log lines otherwise."""
    live = sys.stdout.isatty()
    namespace = "demo" + uuid.uuid4().hex[:6]
    skipped = "--no-spark" if no_spark else spark_unavailable()

    async def run() -> bool:
        if broker is not None:
            return await _Demo(broker, namespace, nodes, duration, live, skipped).run()
        async with EmbeddedBroker() as embedded:
            click.echo(f"embedded mosquitto on {embedded.url} (pid {embedded.pid})")
            return await _Demo(embedded.url, namespace, nodes, duration, live, skipped).run()

    try:
        ok = run_command(run)
    except KeyboardInterrupt:
        click.echo("broker-mqtt: demo interrupted", err=True)
        sys.exit(130)
    if not ok:
        sys.exit(EXIT_CHECK_FAILED)
