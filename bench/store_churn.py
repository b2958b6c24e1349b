"""Elected-store memory under churn: rounds of puts and erases of fresh keys, RSS per round.

Two OS processes on one embedded mosquitto, durability "one": this script (the writer and the
store's master, the only candidate) and a follower replica (this script with ``--role follower``,
``candidate=False``). Each round puts ``--keys`` fresh keys (100-byte values) and erases them
again, ``--inflight`` writes in flight, so the store is empty after every round. Then it waits until
both replicas hold no tombstone (the master forgets them ``--ttl`` s after the erase; with
``--ttl none`` it waits nothing) and prints, per round, both processes' RSS before and after the
round, the tombstones left, and with ``--backend sqlite`` the state files' size (db + wal).

Issue 20 item 6: before tombstones were forgotten, 8 rounds of 50,000 grew a process from 70 to
217 MB; the target is RSS after round 8 within 20 % of round 1. The last line says whether it is.
Run: ``python bench/store_churn.py [--rounds 8] [--keys 50000] [--ttl 1] [--backend sqlite]``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STORE = "churn"
ELECTION = {"cycle": 1.0, "gap": 0.25}


def rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def files_mb(path: Path | None) -> float:
    if path is None:
        return 0.0
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1e6


def _ttl(text: str) -> float | None:
    return None if text == "none" else float(text)


async def _attach(ep: Any, args: argparse.Namespace, path: Path | None, candidate: bool) -> Any:
    from broker_mqtt.store.elected_attach import attach_store

    kwargs: dict[str, Any] = {}
    if args.ttl != "default" and "tombstone_ttl" in inspect.signature(attach_store).parameters:
        kwargs["tombstone_ttl"] = _ttl(args.ttl)  # (a version from before tombstone_ttl: --ttl none)
    return await attach_store(ep, STORE, backend=args.backend, path=path, election=ELECTION,
                              candidate=candidate, **kwargs)


async def _follower(args: argparse.Namespace) -> None:
    """Hold a replica; answer every stdin line with a JSON status line."""
    import anyio

    from broker_mqtt import Endpoint

    path = Path(args.path) if args.path else None
    async with Endpoint(args.url, namespace=args.namespace) as ep, await _attach(ep, args, path, False) as store:
        print("READY", flush=True)
        stdin = anyio.wrap_file(sys.stdin)
        while await stdin.readline():
            state = store.replica.state
            print(json.dumps({"rss": rss_mb(), "tombstones": state.tombstones, "len": len(store),
                              "seq": state.last_seq, "files": files_mb(path)}), flush=True)


class Follower:
    def __init__(self, url: str, namespace: str, args: argparse.Namespace, path: Path | None) -> None:
        cmd = [sys.executable, __file__, "--role", "follower", "--url", url, "--namespace", namespace,
               "--backend", args.backend, "--ttl", args.ttl, "--path", str(path or "")]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"follower did not start: {line!r}")

    def status(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("status\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def _run(args: argparse.Namespace, url: str, tmp: Path) -> dict[str, Any]:
    import anyio

    from broker_mqtt import Endpoint

    ns = f"churn-{uuid.uuid4().hex[:8]}"
    sqlite = args.backend == "sqlite"
    follower = Follower(url, ns, args, tmp / "follower.db" if sqlite else None)
    master_path = tmp / "master.db" if sqlite else None
    rows: list[dict[str, Any]] = []
    value = "x" * 100
    try:
        async with Endpoint(url, namespace=ns) as ep, await _attach(ep, args, master_path, True) as store:
            with anyio.fail_after(30):
                while not store.is_master or len(store.replica.members()) < 1:
                    await store.wait_change()
            async def worker(write: Any, keys: Any) -> None:
                for key in keys:  # the workers share one iterator: inflight writes in flight
                    await write(key)

            async def put(key: str) -> None:
                await store.put(key, value)

            ttl = 60.0 if args.ttl == "default" else _ttl(args.ttl)

            for r in range(1, args.rounds + 1):
                before = (rss_mb(), follower.status()["rss"])
                start = time.monotonic()
                keys = [f"r{r}-{i}" for i in range(args.keys)]
                for write in (put, store.erase):
                    async with anyio.create_task_group() as tg:
                        shared = iter(keys)
                        for _ in range(args.inflight):
                            tg.start_soon(worker, write, shared)
                took = time.monotonic() - start
                left = store.replica.state.tombstones
                deadline = time.monotonic() + 60 + (ttl or 0.0)
                while ttl is not None:  # until both replicas forgot the round's tombstones
                    status = follower.status()
                    if store.replica.state.tombstones == 0 and status["tombstones"] == 0:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"round {r}: tombstones not forgotten: {status}")
                    await anyio.sleep(0.2)
                status = follower.status()
                row = {"round": r, "writes_per_s": 2 * args.keys / took, "tombstones_at_end": left,
                       "master_rss_before": before[0], "master_rss_after": rss_mb(),
                       "follower_rss_before": before[1], "follower_rss_after": status["rss"],
                       "tombstones_after": store.replica.state.tombstones, "len": len(store),
                       "master_files_mb": files_mb(master_path), "follower_files_mb": status["files"]}
                rows.append(row)
                print(f"round {r}: {row['writes_per_s']:8,.0f} writes/s  master RSS {row['master_rss_before']:6.1f}"
                      f" -> {row['master_rss_after']:6.1f} MB  follower RSS {row['follower_rss_before']:6.1f} ->"
                      f" {row['follower_rss_after']:6.1f} MB  tombstones at end {left:,}, after"
                      f" {row['tombstones_after']:,}" + (f"  files master {row['master_files_mb']:.1f} MB follower"
                                                          f" {row['follower_files_mb']:.1f} MB" if sqlite else ""),
                      flush=True)
    finally:
        follower.stop()
    first, last = rows[0], rows[-1]
    growth = {who: last[f"{who}_rss_after"] / first[f"{who}_rss_after"] for who in ("master", "follower")}
    print(f"RSS after round {last['round']} / after round 1: master {growth['master']:.2f}, follower "
          f"{growth['follower']:.2f} (target <= 1.20: {'met' if max(growth.values()) <= 1.2 else 'NOT met'})")
    return {"args": vars(args), "rounds": rows, "growth": growth}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--keys", type=int, default=50_000, help="fresh keys put and erased per round")
    p.add_argument("--inflight", type=int, default=256)
    p.add_argument("--ttl", default="1", help="tombstone_ttl in s, 'none' (never), or 'default' (attach_store's)")
    p.add_argument("--backend", choices=["memory", "sqlite"], default="memory")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--role", choices=["follower"], help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--namespace", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    args = p.parse_args()
    import anyio

    if args.role == "follower":
        anyio.run(_follower, args)
        return
    from broker_mqtt import EmbeddedBroker

    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="churn-") as tmp:
        result = anyio.run(_run, args, broker.url, Path(tmp))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
