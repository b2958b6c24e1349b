"""A work-queue node in its own process, for tests/queue and bench/work_queue.py.

``queue_node.py URL NAMESPACE QUEUE [options]`` joins work queue QUEUE (a replica of its elected store;
``--no-candidate``: never master; ``--no-replica``: only publishes and consumes; ``--cycle``/``--gap``/
``--n-hosts``: the election's configuration; ``--mode``: sticky or rotate; ``--lease``,
``--max-deliveries``, ``--sqlite PATH``: the queue's options)
and prints one line per fact, flushed at once (times: ``time.monotonic()``, shared by the processes
of one machine):

* ``READY <node id>``; ``MASTER <term> <master node id> <time>`` when a master becomes active;
* ``--publish N --tag T``: publishes ``[T, 0]`` ... ``[T, N-1]`` from ``--concurrency`` tasks, printing
  ``PUBLISH_START <process CPU s>`` once it is master, ``PUBLISHED <T> <i> <id>`` once each is durable,
  then ``PUBLISH_DONE <time>``;
* ``--consume MODE`` (accept, hold, release, reject): ``DELIVERED <id> <count> <time> <json data>`` per
  delivery, then ``ACCEPTED|RELEASED|REJECTED <id> <json data>`` once settled (durable) or
  ``NOTHELD <id>``; settlements run in concurrent tasks; ``hold`` never settles. ``accept-nowait``:
  ``accept_nowait()`` per delivery, ``drain()`` every 0.05 s (accepted counts what it confirmed;
  ``NOTHELD <id>`` per failure), no per-message lines but DELIVERED. ``--limit K``: leave the
  consumer (releasing what it holds) after K deliveries, printing ``LEFT``.
* ``--quiet``: instead of per-message lines, ``PROGRESS <published> <accepted> <time>`` every 0.1 s.
* ``--store-puts N``: the baseline of bench/queue.py: joins the elected store ``baseline`` (not a queue)
  and puts N values into it from ``--concurrency`` tasks, counted as published in ``PROGRESS`` lines.
* SIGUSR2: ``DUMP <json>`` (local counts, dead letters, master) once the replica is idle.

SIGTERM leaves cleanly (consumer released, mastership handed over) and exits.
"""

import argparse
import json
import signal
import sys
import time

import anyio
import anyio.lowlevel
from line_procs import out, tune_node_collector

from broker_mqtt import Endpoint
from broker_mqtt.queue import Consumer, MessageState, NotHeld, attach_queue
from broker_mqtt.store import MasterChanged, attach_store


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("namespace")
    p.add_argument("queue")
    p.add_argument("--cycle", type=float, default=1.0)
    p.add_argument("--gap", type=float, default=0.25)
    p.add_argument("--mode", choices=["sticky", "rotate"], default="sticky")
    p.add_argument("--n-hosts", type=int, help="the election's rough group size (asyncactor n_hosts)")
    p.add_argument("--no-candidate", action="store_true")
    p.add_argument("--no-replica", action="store_true")
    p.add_argument("--sqlite")
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--max-deliveries", type=int, default=10)
    p.add_argument("--publish", type=int, default=0)
    p.add_argument("--tag", default="p")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--consume", choices=["accept", "accept-nowait", "hold", "release", "reject"])
    p.add_argument("--prefetch", type=int, default=10)
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--store-puts", type=int)
    p.add_argument("--keepalive", type=int, default=10, help="the endpoint's MQTT keep-alive (s)")
    args = p.parse_args()
    counts = {"published": 0, "accepted": 0}
    async with Endpoint(args.url, namespace=args.namespace, keepalive=args.keepalive) as ep:
        q = await attach_queue(ep,
            args.queue, backend="sqlite" if args.sqlite else "memory", path=args.sqlite,
            election={"cycle": args.cycle, "gap": args.gap, **({"n_hosts": args.n_hosts} if args.n_hosts else {})},
            mode=args.mode,
            candidate=not args.no_candidate, lease=args.lease,
            max_deliveries=args.max_deliveries, write_timeout=60, replica=not args.no_replica)

        async def watch() -> None:
            if q.store is None:
                return
            async with q.store.events(data=False) as events:
                if q.master is not None and q.store.epoch is not None:
                    out("MASTER", q.store.epoch[0], q.master, time.monotonic())
                async for e in events:
                    if isinstance(e, MasterChanged) and e.master is not None and e.epoch is not None:
                        out("MASTER", e.epoch[0], e.master, time.monotonic())

        async def progress() -> None:
            while True:
                out("PROGRESS", counts["published"], counts["accepted"], time.monotonic())
                await anyio.sleep(0.1)

        async def publish() -> None:
            await q.await_master()
            out("PUBLISH_START", time.process_time())  # (bench/work_queue.py: CPU per message, start-up left out)
            numbers = iter(range(args.publish))

            async def one_task() -> None:
                for i in numbers:
                    msg_id = await q.publish([args.tag, i])
                    counts["published"] += 1
                    if not args.quiet:
                        out("PUBLISHED", args.tag, i, msg_id)

            async with anyio.create_task_group() as tg:
                for _ in range(args.concurrency):
                    tg.start_soon(one_task)
            out("PUBLISH_DONE", time.monotonic())

        async def store_puts() -> None:
            store = await attach_store(ep, "baseline", election={"cycle": args.cycle, "gap": args.gap},
                                          candidate=not args.no_candidate, write_timeout=60)
            await store.await_master()
            numbers = iter(range(args.store_puts))

            async def one_task() -> None:
                for i in numbers:
                    await store.put(i, [args.tag, i])
                    counts["published"] += 1

            async with anyio.create_task_group() as tg:
                for _ in range(args.concurrency):
                    tg.start_soon(one_task)
            out("PUBLISH_DONE", time.monotonic())

        async def settle(d: object, how: str) -> None:
            try:
                if how == "accept":
                    await d.accept()  # type: ignore[attr-defined]
                    counts["accepted"] += 1
                elif how == "release":
                    await d.release()  # type: ignore[attr-defined]
                else:
                    await d.reject(f"rejected by {ep.id.hex}")  # type: ignore[attr-defined]
            except NotHeld:
                out("NOTHELD", d.id)  # type: ignore[attr-defined]
                return
            if not args.quiet:
                word = {"accept": "ACCEPTED", "release": "RELEASED", "reject": "REJECTED"}[how]
                out(word, d.id, json.dumps(d.data))  # type: ignore[attr-defined]

        async def drain_loop(deliveries: Consumer) -> None:
            while True:
                await anyio.sleep(0.05)
                made = nowait["made"]  # drain() decides those made before the call
                failures = await deliveries.drain()
                for d, _error in failures:
                    out("NOTHELD", d.id)
                counts["accepted"] += made - nowait["counted"] - len(failures)
                nowait["counted"] = made

        nowait = {"made": 0, "counted": 0}

        async def consume() -> None:
            await q.await_master()
            seen = 0
            async with q.consume(prefetch=args.prefetch) as deliveries, anyio.create_task_group() as tg:
                if args.consume == "accept-nowait":
                    tg.start_soon(drain_loop, deliveries)
                async for d in deliveries:
                    seen += 1
                    if not args.quiet:
                        out("DELIVERED", d.id, d.delivery_count, time.monotonic(), json.dumps(d.data))
                    if args.consume == "accept-nowait":
                        d.accept_nowait()
                        nowait["made"] += 1
                    elif args.consume != "hold":
                        tg.start_soon(settle, d, args.consume)
                    if args.limit and seen >= args.limit:
                        break
            out("LEFT")

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            if args.quiet:
                tg.start_soon(progress)
            await anyio.lowlevel.checkpoint()
            tune_node_collector()  # (docs/queues.md § 5; this queue is new, nothing to join first)
            out("READY", q.store.node_id if q.store is not None else ep.id.hex)
            if args.publish:
                tg.start_soon(publish)
            if args.store_puts is not None:
                tg.start_soon(store_puts)
            if args.consume:
                tg.start_soon(consume)
            with anyio.open_signal_receiver(signal.SIGUSR2, signal.SIGTERM) as signals:
                async for sig in signals:
                    if sig == signal.SIGUSR2:
                        assert q.store is not None, "DUMP needs a replica"
                        await q.store.await_idle(30)
                        stats = q.statistics()
                        out("DUMP", json.dumps({
                            "ready": stats.ready, "acquired": stats.acquired, "dead": stats.dead,
                            "dead_letters": [[x.id, x.data, x.delivery_count, x.reason] for x in q.dead_letters()],
                            "live": [[i, r.state.value, r.owner, r.count, r.data] for i, r in q._records()
                                     if r.state is not MessageState.DEAD][:100],
                            "is_master": q.is_master, "master": q.master}))
                    else:
                        break
            tg.cancel_scope.cancel()
        await q.close()


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
