"""A store node in its own process, for tests and the benchmark.

``store_node.py URL NAMESPACE ID ROLE [options]`` with ROLE ``master`` or ``clone`` attaches the
store ``--store`` (default ``s``) and prints ``READY <node id>``. It then answers one JSON line on
stdout per JSON line on stdin: ``{"op": "put", "args": [...], "kwargs": {...}}`` calls that store
operation (``get``, ``put``, ``put_unique``, ``increment``, ``push``, ...); the extra ops are
``await_idle`` / ``await_synced`` (``timeout``), ``dump`` (sorted ``[key, value]`` pairs),
``info`` (stale, master id) and ``bench_*`` (see bench/store.py). Answers: ``{"ok": value}`` or
``{"error": "ClassName", "message": "..."}``. EOF on stdin: a clean leave; SIGKILL: a crash.
With ``STORE_NODE_PROFILE=PATH`` in the environment the node runs under cProfile and writes its
statistics to ``PATH.<role>.<pid>`` when it ends (for profiling bench/store.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

import anyio
from line_procs import tune_node_collector

from broker_mqtt import Endpoint
from broker_mqtt import channel as ch
from broker_mqtt.store import attach_clone, attach_master
from broker_mqtt.store.faults import Faults


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


async def bench_puts(store: Any, n: int, prefix: str) -> dict[str, float]:
    start, t0 = time.time(), time.perf_counter()
    put = store.put
    for i in range(n):
        await put(f"{prefix}{i}", i)
    return {"start": start, "elapsed": time.perf_counter() - t0}


async def bench_paced_puts(store: Any, n: int, interval: float) -> dict[str, float]:
    """Put lat0..lat<n-1> every ``interval`` s; return when each was put (wall clock)."""
    sent: dict[str, float] = {}
    next_at = time.monotonic()
    for i in range(n):
        key = f"lat{i}"
        sent[key] = time.time()
        await store.put(key, i)
        next_at += interval
        await anyio.sleep(max(0.0, next_at - time.monotonic()))
    return sent


async def run(op: str, store: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    match op:
        case "await_idle":
            return await store.await_idle(kwargs.get("timeout", 10))
        case "await_synced":
            return await store.await_synced(kwargs.get("timeout", 10))
        case "dump":
            keys = await store.keys(**({"allow_stale": True} if store.role == "clone" else {}))
            out = []
            for k in keys:
                v = await store.get(k, **({"allow_stale": True} if store.role == "clone" else {}))
                out.append([_jsonable(k), _jsonable(v)])
            return sorted(out, key=json.dumps)
        case "info":
            stats = store.statistics()
            faults = {"dropped": stats.fault_dropped, "delayed": stats.fault_delayed}
            return {"stale": store.stale, "master": getattr(store, "master", store.id), "id": store.id,
                    "faults": faults}
        case "bench_put":  # n puts of distinct keys; start (wall clock) and seconds taken (until queued)
            return await bench_puts(store, kwargs["n"], kwargs.get("prefix", "k"))
        case "bench_paced_put":
            return await bench_paced_puts(store, kwargs["n"], kwargs["interval"])
        case "bench_put_unique":
            t0 = time.perf_counter()
            for i in range(kwargs["n"]):
                await store.put_unique(f"{kwargs.get('prefix', 'u')}{i}", i)
            return time.perf_counter() - t0
        case "bench_put_unique_concurrent":  # n put_unique from `workers` concurrent callers
            n, workers = kwargs["n"], kwargs["workers"]
            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for w in range(workers):
                    async def work(w: int = w) -> None:
                        for i in range(w, n, workers):
                            await store.put_unique(f"{kwargs.get('prefix', 'v')}{i}", i)
                    tg.start_soon(work)
            return time.perf_counter() - t0
        case "bench_get":  # seconds for n awaited get() and for n get_nowait() of one key
            key, n = kwargs["key"], kwargs["n"]
            aget, get = store.get, store.get_nowait
            t0 = time.perf_counter()
            for _ in range(n):
                await aget(key)
            t1 = time.perf_counter()
            for _ in range(n):
                get(key)
            return {"get": t1 - t0, "get_nowait": time.perf_counter() - t1}
        case "bench_watch":  # poll (every ms) until key exists; return the wall-clock time it was seen
            key, timeout = kwargs["key"], kwargs.get("timeout", 30)
            with anyio.fail_after(timeout):
                while not await store.exists(key):
                    await anyio.sleep(0.001)
            return time.time()
        case "bench_latency":  # record arrival times of keys lat<i> via events until n seen
            n, timeout = kwargs["n"], kwargs.get("timeout", 30)
            seen: dict[str, float] = {}
            with anyio.fail_after(timeout):
                async with store.events() as ev:
                    print(json.dumps({"ok": "watching"}), flush=True)
                    async for e in ev:
                        key = getattr(e, "key", None)
                        if isinstance(key, str) and key.startswith("lat"):
                            seen[key] = time.time()
                            if len(seen) >= n:
                                break
            return seen
    method = getattr(store, op)
    return _jsonable(await method(*args, **kwargs))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("namespace")
    parser.add_argument("id")
    parser.add_argument("role", choices=["master", "clone"])
    parser.add_argument("--store", default="s")
    parser.add_argument("--sqlite")
    parser.add_argument("--hb", type=float, default=0.2)
    parser.add_argument("--timeout-beats", type=int, default=5)
    parser.add_argument("--loss", type=float, default=0.0)
    parser.add_argument("--reorder", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write-buffer", type=int, default=1024)
    opts = parser.parse_args()
    config = ch.ChannelConfig(heartbeat_interval=opts.hb, ack_interval=min(0.05, opts.hb),
                              connection_timeout=opts.timeout_beats)
    faults = Faults(loss=opts.loss, reorder=opts.reorder, seed=opts.seed) if opts.loss or opts.reorder else None
    async with Endpoint(opts.url, namespace=opts.namespace, id=uuid.UUID(opts.id), name=f"store-{opts.role}") as ep:
        if opts.role == "master":
            kwargs: dict[str, Any] = {"backend": "sqlite", "path": opts.sqlite} if opts.sqlite else {}
            store: Any = await attach_master(ep, opts.store, channel=config, faults=faults,
                                                discovery_timeout=0.1, **kwargs)
        else:
            store = await attach_clone(ep, opts.store, channel=config, faults=faults,
                                          write_buffer=opts.write_buffer)
        tune_node_collector()  # as every benchmark's node process (docs/queues.md § 5)
        print("READY", store.id, flush=True)
        stdin = anyio.wrap_file(sys.stdin)
        while True:
            line = await stdin.readline()
            if not line:
                break
            req = json.loads(line)
            try:
                answer = {"ok": await run(req["op"], store, req.get("args", []), req.get("kwargs", {}))}
            except Exception as exc:  # noqa: BLE001 - every error goes back to the test
                answer = {"error": type(exc).__name__, "message": str(exc)}
            print(json.dumps(answer), flush=True)

if __name__ == "__main__":
    if profile := os.environ.get("STORE_NODE_PROFILE"):  # cProfile the node: stats to <path>.<role>.<pid>
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        try:
            anyio.run(main)
        finally:
            prof.disable()
            prof.dump_stats(f"{profile}.{sys.argv[4]}.{os.getpid()}")
    else:
        anyio.run(main)
