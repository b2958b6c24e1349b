"""A work-queue log reader in its own process, for tests/queue/test_queue_log_live.py.

``log_node.py URL NAMESPACE QUEUE READER [--commit-limit K] [--cycle C --gap G]`` joins work queue QUEUE
with a replica that is never master, registers log reader READER (``start="oldest"``; idempotent) and
reads its log, printing one line per fact, flushed at once:

* ``READY <node id>``, then ``REGISTERED <pointer>`` and ``OPENED <pointer>`` (where reading starts);
* ``READ <id> <state> <json data>`` per entry, in the order read;
* ``COMMITTED <id>`` once the commit of that entry is durable. ``--commit-limit K``: commit only the
  first K entries read (the rest are read, never committed: a reader killed "between read and commit").
* SIGUSR2: ``DUMP <json>`` (local statistics and readers) once the replica is idle.
"""

import argparse
import json
import signal
import sys
from pathlib import Path

import anyio
import anyio.lowlevel

from broker_mqtt import Endpoint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from line_procs import out  # noqa: E402 - tests/ holds the node line protocol

from broker_mqtt.queue import attach_queue


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("namespace")
    p.add_argument("queue")
    p.add_argument("reader")
    p.add_argument("--commit-limit", type=int)
    p.add_argument("--cycle", type=float, default=1.0)
    p.add_argument("--gap", type=float, default=0.25)
    args = p.parse_args()
    async with Endpoint(args.url, namespace=args.namespace) as ep:
        q = await attach_queue(ep, args.queue, election={"cycle": args.cycle, "gap": args.gap}, candidate=False,
                                  write_timeout=60)
        assert q.store is not None

        async def read() -> None:
            await q.await_master()
            out("REGISTERED", await q.register_reader(args.reader))
            committed = 0
            async with q.read_log(args.reader) as log:
                out("OPENED", log.position)
                async for entry in log:
                    out("READ", entry.id, entry.state.value, json.dumps(entry.data))
                    if args.commit_limit is None or committed < args.commit_limit:
                        await log.commit(entry.id)
                        committed += 1
                        out("COMMITTED", entry.id)

        async with anyio.create_task_group() as tg:
            await anyio.lowlevel.checkpoint()
            out("READY", q.store.node_id)
            tg.start_soon(read)
            with anyio.open_signal_receiver(signal.SIGUSR2, signal.SIGTERM) as signals:
                async for sig in signals:
                    if sig == signal.SIGUSR2:
                        await q.store.await_idle(30)
                        stats = q.statistics()
                        out("DUMP", json.dumps({"ready": stats.ready, "acquired": stats.acquired, "dead": stats.dead,
                                                "retained": stats.retained, "readers": q.readers()}))
                    else:
                        break
            tg.cancel_scope.cancel()
        await q.close()


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
