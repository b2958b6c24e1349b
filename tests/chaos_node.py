"""A node of bench/chaos.py in its own process: an elected store, a work queue and a pub/sub stream.

``chaos_node.py URL NAMESPACE --name N [--cycle C --gap G --lease L --rate R]`` joins elected store
``chaos-store`` and work queue ``chaos-queue`` (memory replicas, sticky, durability "one"), then runs
four loads until SIGUSR1, printing one line per fact, flushed at once (times: ``time.monotonic()``):

* ``EP <endpoint id hex> <time>``, ``READY <store node id>``; ``MASTER <term> <store master node id> <time>`` when one becomes active;
* store writer: pushes 0, 1, ... onto ``log-<store node id>``: ``ACK <i> <time>`` once acknowledged,
  ``WFAIL <i> <error>`` when the push raised (not acknowledged: not counted);
* queue publisher: publishes ``[<name>-<pid>, i]``: ``PUBLISHED <tag> <i> <id> <time>`` once durable,
  ``PFAIL <i> <error>`` when it raised;
* queue consumer (prefetch 10): ``ACCEPTED <id> <json data> <time>`` once the accept is durable,
  ``NOTHELD <id>`` when the lease was lost first;
* pub/sub: publishes ``[<endpoint id hex>, seq]`` on ``/chaos/ps`` ``--rate`` times a second and
  subscribes to ``/chaos/ps`` (its own are not echoed);
* ``MISSED <sender> <topic> <n>`` per ``MessagesMissed`` status event (a gap in a sender's numbers);
* ``ACCEPTING <id> <json data>`` before each accept (a consumer killed during it leaves no ACCEPTED).

SIGUSR1: stop every producer, wait until the writes in flight are answered, print ``QUIET``.
SIGUSR2: ``DUMP <json>``: store contents, queue counts and dead letters, per pub/sub sender the
sequence numbers received (count, distinct, lowest, highest, gaps), how many this node published,
and the endpoint's counters. SIGTERM leaves and exits.
"""

import argparse
import itertools
import json
import os
import signal
import sys
import time

import anyio
import anyio.lowlevel
from line_procs import out

from broker_mqtt import Endpoint, MessagesMissed
from broker_mqtt.queue import MessageState, NotHeld, attach_queue
from broker_mqtt.store import ConflictResolved, ElectedStore, MasterChanged, attach_store


def trace_elections() -> None:
    """``CHAOS_TRACE=1``: log (stderr, CLOCK_MONOTONIC times) every election message this node's
    actors receive and every tag change, and the elected stores' claims, to explain a run."""
    import logging

    from asyncactor import ActorCore

    logging.basicConfig(level=logging.INFO, format="%(created).3f %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("broker_mqtt.endpoint").setLevel(logging.WARNING)
    receive, timer = ActorCore.receive, ActorCore.timer

    def traced_receive(self: ActorCore, raw: object, now: float) -> None:
        receive(self, raw, now)
        print(f"{time.monotonic():.3f} E {self.name[-8:]} got {raw} -> {self.phase.name} {self.history[:3]}",
              file=sys.stderr, flush=True)

    def traced_timer(self: ActorCore, now: float) -> None:
        before = self.phase
        timer(self, now)
        if self.phase is not before or self._out:
            print(f"{time.monotonic():.3f} E {self.name[-8:]} timer {before.name}->{self.phase.name} out={self._out}",
                  file=sys.stderr, flush=True)

    ActorCore.receive = traced_receive  # type: ignore[method-assign]
    ActorCore.timer = traced_timer  # type: ignore[method-assign]


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("namespace")
    p.add_argument("--name", required=True)
    p.add_argument("--cycle", type=float, default=1.0)
    p.add_argument("--gap", type=float, default=0.25)
    p.add_argument("--lease", type=float, default=5.0)
    p.add_argument("--rate", type=float, default=50.0)
    args = p.parse_args()
    election = {"cycle": args.cycle, "gap": args.gap}
    stop = anyio.Event()
    inflight = {"n": 0}
    idle = anyio.Event()
    ps: dict[str, list[int]] = {}  # sender -> sequence numbers received, in arrival order
    sent = {"n": 0}
    tag = f"{args.name}-{os.getpid()}"
    async with Endpoint(args.url, namespace=args.namespace, name=args.name) as ep:
        store = await attach_store(ep, "chaos-store", mode="sticky", election=election, durability="one",
                                   write_timeout=60)
        q = await attach_queue(ep, "chaos-queue", election=election, lease=args.lease, max_deliveries=10,
                               write_timeout=60)
        key = f"log-{store.node_id}"

        class Busy:
            def __enter__(self) -> None:
                inflight["n"] += 1

            def __exit__(self, *exc: object) -> None:
                inflight["n"] -= 1
                if stop.is_set() and inflight["n"] == 0:
                    idle.set()

        async def writer() -> None:
            await store.await_master()
            for i in itertools.count():
                if stop.is_set():
                    return
                with Busy():
                    try:
                        await store.push(key, i)
                    except Exception as exc:  # noqa: BLE001 - a failed write is a fact to print
                        out("WFAIL", i, type(exc).__name__)
                        continue
                    out("ACK", i, time.monotonic())

        async def publisher() -> None:
            await q.await_master()
            for i in itertools.count():
                if stop.is_set():
                    return
                with Busy():
                    try:
                        msg_id = await q.publish([tag, i])
                    except Exception as exc:  # noqa: BLE001
                        out("PFAIL", i, type(exc).__name__)
                        continue
                    out("PUBLISHED", tag, i, msg_id, time.monotonic())
                await anyio.sleep(0.02)

        async def consumer() -> None:
            await q.await_master()
            async with q.consume(prefetch=10) as deliveries:
                async for d in deliveries:
                    with Busy():
                        out("ACCEPTING", d.id, json.dumps(d.data))
                        try:
                            await d.accept()
                        except NotHeld:
                            out("NOTHELD", d.id)
                            continue
                        except Exception as exc:  # noqa: BLE001
                            out("AFAIL", d.id, type(exc).__name__)
                            continue
                        out("ACCEPTED", d.id, json.dumps(d.data), time.monotonic())

        async def pubsub_out() -> None:
            me = ep.id.hex
            for seq in itertools.count():
                if stop.is_set():
                    return
                await ep.publish("/chaos/ps", [me, seq])
                sent["n"] = seq + 1
                await anyio.sleep(1 / args.rate)

        async def pubsub_in() -> None:
            async with ep.subscribe("/chaos/ps") as sub:
                async for msg in sub:
                    sender, seq = msg.data
                    ps.setdefault(sender, []).append(seq)

        async def watch(which: str, st: ElectedStore) -> None:
            async with st.events(data=False) as events:
                if st.master is not None and st.epoch is not None:
                    out(which, st.epoch[0], st.master, time.monotonic())
                async for e in events:
                    if isinstance(e, MasterChanged) and e.master is not None and e.epoch is not None:
                        out(which, e.epoch[0], e.master, time.monotonic())
                    elif isinstance(e, ConflictResolved):
                        out("CONFLICT", which, time.monotonic(), json.dumps(e.key))

        async def status() -> None:
            async with ep.status() as events:
                async for e in events:
                    if isinstance(e, MessagesMissed):
                        out("MISSED", e.sender.hex, e.topic, e.missed)

        def dump() -> dict[str, object]:
            senders = {}
            for sender, seqs in ps.items():
                distinct = sorted(set(seqs))
                senders[sender] = {"received": len(seqs), "distinct": len(distinct), "low": distinct[0],
                                   "high": distinct[-1], "gaps": distinct[-1] - distinct[0] + 1 - len(distinct)}
            stats = q.statistics()
            st = ep.statistics()
            return {
                "is_master": store.is_master, "epoch": store.epoch,
                "queue": {"ready": stats.ready, "acquired": stats.acquired, "dead": stats.dead,
                          "dead_letters": [[x.id, x.data, x.reason] for x in q.dead_letters()],
                          "live": [[i, r.state.value, r.owner, r.count, r.data] for i, r in q._records()
                                   if r.state is not MessageState.DEAD][:100],
                          "other": {json.dumps(k): v for k, v in q.store.items_nowait()
                                    if not isinstance(k, int)} if q.store is not None else {}},
                "pubsub": senders, "pubsub_sent": sent["n"], "me": ep.id.hex,
                "endpoint": {k: getattr(st, k) for k in type(st).__slots__},
            }

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, "MASTER", store)
            assert q.store is not None
            tg.start_soon(watch, "QMASTER", q.store)
            for fn in (status, pubsub_in):
                tg.start_soon(fn)
            await anyio.lowlevel.checkpoint()
            out("EP", ep.id.hex, time.monotonic())
            out("READY", store.node_id)
            for fn in (writer, publisher, consumer, pubsub_out):
                tg.start_soon(fn)
            with anyio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM) as signals:
                async for sig in signals:
                    if sig == signal.SIGUSR1:
                        stop.set()
                        if inflight["n"] == 0:
                            idle.set()
                        with anyio.move_on_after(60):
                            await idle.wait()
                        await ep.flush(30)
                        await store.await_idle(30)
                        out("QUIET")
                    elif sig == signal.SIGUSR2:
                        await store.await_idle(30)
                        d = dump()
                        d["contents"] = {json.dumps(k): v for k, v in await store.items()}
                        out("DUMP", json.dumps(d))
                    else:
                        break
            tg.cancel_scope.cancel()
        await q.close()
        await store.close()


if __name__ == "__main__":
    if os.environ.get("CHAOS_TRACE"):
        trace_elections()
    anyio.run(main)
    sys.exit(0)
