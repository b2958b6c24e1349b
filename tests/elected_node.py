"""An elected-store node in its own process, for tests and bench/failover.py.

``elected_node.py URL NAMESPACE STORE MODE CYCLE GAP [--sqlite PATH] [--writers K] [--durability D]``

Joins elected store STORE and, with ``--writers K`` (K > 0), keeps K writes in flight, each pushing the
next number onto the list ``log-<node id>`` (with ``--chunk C``, number i >= C onto ``log-<node id>/<i // C>``). It prints one line per fact, flushed at once; times are
this process's ``time.monotonic()`` (CLOCK_MONOTONIC, shared by the processes of one machine):

* ``READY <node id>``
* ``ACK <i> <time>``: the push of ``i`` was acknowledged (durable per the store's setting);
* ``MASTER <term> <master node id> <time>``: a master became active;
* ``STATS <json>``: right after each MASTER line, this node's statistics (what it fetched so far);
* ``COUNTERS <json>``: on SIGWINCH, this node's statistics at once;
* ``CONFLICT <key>``;
* ``QUIET``: on SIGUSR1 writing stops and the node waits until its writes are all answered;
* ``DUMP <json>``: on SIGUSR2 the node waits until idle and prints its contents.

SIGTERM closes the store (handing mastership over) and exits.

With ``ELECTED_TRACE=1`` in its environment the node writes to stderr when it stalls: every garbage
collection of generation 2, and every time its event loop woke more than 50 ms late
(``TRACE gc|lag <ms> <time>``), and the store's log lines; ``bench/failover.py --trace`` sets it.
"""

import argparse
import dataclasses
import gc
import itertools
import json
import logging
import os
import signal
import sys
import time

import anyio
import anyio.lowlevel
from line_procs import out

from broker_mqtt import Endpoint
from broker_mqtt.store import ConflictResolved, MasterChanged, attach_store


def _trace_stalls() -> None:
    """Log generation-2 collections and their length to stderr (see the module's docstring)."""
    began = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            began[0] = time.monotonic()
        else:
            now = time.monotonic()
            print(f"TRACE gc {1000 * (now - began[0]):.1f} {now:.3f} collected={info.get('collected')} "
                  f"objects={len(gc.get_objects())}", file=sys.stderr, flush=True)

    gc.callbacks.append(on_gc)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(created).3f %(name)s %(message)s")


async def _watch_lag() -> None:
    """Log every wake-up of a 20 ms sleep that came more than 50 ms late."""
    while True:
        before = time.monotonic()
        await anyio.sleep(0.02)
        late = time.monotonic() - before - 0.02
        if late > 0.05:
            print(f"TRACE lag {1000 * late:.1f} {time.monotonic():.3f}", file=sys.stderr, flush=True)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("namespace")
    p.add_argument("store")
    p.add_argument("mode")
    p.add_argument("cycle", type=float)
    p.add_argument("gap", type=float)
    p.add_argument("--sqlite")
    p.add_argument("--resident", default="memory", help="with --sqlite: memory or disk (attach_store's resident)")
    p.add_argument("--writers", type=int, default=0)
    p.add_argument("--durability", default="one")
    p.add_argument("--n-hosts", type=int, help="the election's rough group size (asyncactor n_hosts)")
    p.add_argument("--chunk", type=int, default=0,
                   help="push onto log-<node id>/<i // CHUNK> (0: one list): every replica copies a list "
                        "per push, so a long run keeps its lists short")
    args = p.parse_args()
    tracing = bool(os.environ.get("ELECTED_TRACE"))
    if tracing:
        _trace_stalls()
    async with Endpoint(args.url, namespace=args.namespace) as ep:
        store = await attach_store(ep,
            args.store, backend="sqlite" if args.sqlite else "memory", path=args.sqlite, resident=args.resident,
            mode=args.mode,
            election={"cycle": args.cycle, "gap": args.gap, **({"n_hosts": args.n_hosts} if args.n_hosts else {})},
            durability=args.durability, write_timeout=60)
        stop = anyio.Event()
        counter = itertools.count()
        key = f"log-{store.node_id}"

        async def writer() -> None:
            await store.await_master()
            while not stop.is_set():
                i = next(counter)
                await store.push(f"{key}/{i // args.chunk}" if args.chunk and i >= args.chunk else key, i)
                out("ACK", i, time.monotonic())

        async def watch() -> None:
            async with store.events() as events:
                if store.master is not None and store.epoch is not None:  # active before we listened
                    out("MASTER", store.epoch[0], store.master, time.monotonic())
                async for e in events:
                    if isinstance(e, MasterChanged) and e.master is not None and e.epoch is not None:
                        out("MASTER", e.epoch[0], e.master, time.monotonic())
                        out("STATS", json.dumps(dataclasses.asdict(store.statistics())))
                    elif isinstance(e, ConflictResolved):
                        out("CONFLICT", json.dumps(e.key))

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            if tracing:
                tg.start_soon(_watch_lag)
            await anyio.lowlevel.checkpoint()
            out("READY", store.node_id)
            for _ in range(args.writers):
                tg.start_soon(writer)
            with anyio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM,
                                            signal.SIGWINCH) as signals:
                async for sig in signals:
                    if sig == signal.SIGWINCH:
                        out("COUNTERS", json.dumps(dataclasses.asdict(store.statistics())))
                    elif sig == signal.SIGUSR1:
                        stop.set()
                        await store.await_idle(30)
                        out("QUIET")
                    elif sig == signal.SIGUSR2:
                        await store.await_idle(30)
                        contents = {json.dumps(k): v for k, v in await store.items()}
                        out("DUMP", json.dumps({"contents": contents, "master": store.master,
                                                 "epoch": store.epoch, "is_master": store.is_master,
                                                 "stats": dataclasses.asdict(store.statistics())}))
                    else:
                        break
            stop.set()
            await store.close()
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
