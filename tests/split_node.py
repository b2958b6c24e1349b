"""An elected-store node that writes the keys it is told to, for the split test.

``split_node.py URL NAMESPACE STORE CYCLE GAP``

Joins elected store STORE (sticky mode, memory backend) and reads commands from stdin, one a line,
each run in its own task (a write blocked on a missing master does not hold up the others):

* ``{"id": ID, "op": "put", "key": K, "value": V}`` / ``{"id": ID, "op": "erase", "key": K}`` (JSON):
  answered by ``ACK <id>`` once the write is durable, or ``ERR <id> <message>``;
* ``{"id": ID, "op": "dump"}``: waits until the copy is idle (at most 30 s), then ``DUMP <id> <json>``
  with the contents (keys JSON-encoded), master, epoch, is_master, stale and idle.

It prints, flushed at once: ``READY <node id>``; ``MASTER <term> <master node id>`` when a master
becomes active; ``CONFLICT <json>`` (key, chosen and other as ``[value, deleted, origin]``). On
stdin's end or SIGTERM it closes the store and exits. Diagnostics go to stderr.
"""

import json
import signal
import sys
import time
from typing import Any

import anyio
import anyio.lowlevel
from line_procs import out

from broker_mqtt import Endpoint
from broker_mqtt.store import ConflictResolved, MasterChanged, StaleChanged, attach_store


def log(*parts: object) -> None:
    print(f"{time.monotonic():.3f}", *parts, file=sys.stderr, flush=True)


def version(v: Any) -> list[Any]:
    return [v.value, v.deleted, v.origin]


async def main() -> None:
    url, namespace, name, cycle, gap = sys.argv[1:6]
    async with Endpoint(url, namespace=namespace) as ep:
        store = await attach_store(ep, name, mode="sticky", election={"cycle": float(cycle), "gap": float(gap)},
                                      write_timeout=60)

        async def watch() -> None:
            async with store.events() as events:
                # events before this subscription are not replayed: a node that starts after the
                # master became active learns of it before it subscribes (no checkpoint in between)
                if store.master is not None and store.epoch is not None:
                    log("master (already)", store.master, store.epoch)
                    out("MASTER", store.epoch[0], store.master)
                async for e in events:
                    if isinstance(e, MasterChanged):
                        log("master", e.master, e.epoch)
                        if e.master is not None and e.epoch is not None:
                            out("MASTER", e.epoch[0], e.master)
                    elif isinstance(e, ConflictResolved):
                        log("conflict", e)
                        out("CONFLICT", json.dumps({"key": e.key, "chosen": version(e.chosen),
                                                    "other": version(e.other)}))
                    elif isinstance(e, StaleChanged):
                        log("stale", e.stale, e.reason)

        async def run(line: str) -> None:
            cmd = json.loads(line)
            ident, op = cmd["id"], cmd["op"]
            try:
                if op == "put":
                    await store.put(cmd["key"], cmd["value"])
                elif op == "erase":
                    await store.erase(cmd["key"])
                elif op == "dump":
                    idle = await store.await_idle(30)
                    contents = {json.dumps(k): v for k, v in await store.items()}
                    out("DUMP", ident, json.dumps({"contents": contents, "master": store.master,
                                                   "epoch": store.epoch, "is_master": store.is_master,
                                                   "stale": store.stale, "idle": idle}))
                    return
                else:
                    raise ValueError(f"unknown command {op!r}")
            except Exception as exc:  # reported to the test, which fails on it
                log("command failed", line, repr(exc))
                out("ERR", ident, repr(exc).replace("\n", " "))
                return
            out("ACK", ident)

        async def commands() -> None:
            async for line in anyio.wrap_file(sys.stdin):
                if line.strip():
                    tg.start_soon(run, line.strip())
            done.set()

        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await anyio.lowlevel.checkpoint()
            out("READY", store.node_id)
            tg.start_soon(commands)

            async def signals() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM) as received:
                    async for _ in received:
                        done.set()
                        return

            tg.start_soon(signals)
            await done.wait()
            await store.close()
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
