"""What the writers an elected store's master has heard cost each later write.

A master remembers every writer that wrote during its mastership (to answer each one once, and again
on a repeat). Writers are often many and short-lived: a Spark job's writer is named by its job, batch
and partition, so a day of micro-batches makes thousands. Each acknowledgement from a follower makes
the master answer what became durable; if it looks at every writer it has heard, each write costs
more the longer the master lives.

Two replicas (the sans-io ``Replica``, no network: each message is handed over directly, CBOR-encoded
and decoded as on the wire), durability one. The master first applies one write from each of ``W``
writers without a replica (each answered); then ``--rounds`` times: one write of its own, its log to
the follower, the follower's ack back, the answer. Prints µs per round for each ``W``; the baseline is
the first size (few writers), in the same run.

Prints a table and writes bench/results/master_writers.json.
Run: ``python bench/master_writers.py [--writers 10,1000,10000] [--rounds 2000]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker_mqtt.store.commands import Put  # noqa: E402
from broker_mqtt.store.replication import Replica, WriteDone  # noqa: E402
from broker_mqtt.store.versioned import Clock, VersionedState  # noqa: E402
from broker_mqtt.wire.codec import decode, encode  # noqa: E402


class Pair:
    """A master and a follower of one store, messages handed over at once; time is advanced by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        clock = Clock(wall=lambda: 1_700_000_000 + self.now)
        self.master = Replica("s", "a.0", VersionedState(), self.now, durability="one", clock=clock)
        self.follower = Replica("s", "b.0", VersionedState(), self.now, durability="one", clock=clock)
        self.settle(1.0)
        self.master.tagged(self.now)
        self.settle(1.0)
        if not self.master.is_master:
            raise RuntimeError("the master did not take over")

    def exchange(self) -> int:
        """Deliver what each sends to the other until both are quiet; the master's own writes answered."""
        done = 0
        for _ in range(10):
            moved = False
            for src, dst in ((self.master, self.follower), (self.follower, self.master)):
                for msg in src.to_send():
                    dst.handle(decode(encode(msg)), self.now)
                    moved = True
            done += sum(isinstance(e, WriteDone) for e in self.master.events())
            self.follower.events()
            if not moved:
                break
        return done

    def settle(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now += 0.05
            for r in (self.master, self.follower):
                r.tick(self.now, 1_700_000_000 + self.now)
            self.exchange()


def run(writers: int, rounds: int) -> dict[str, Any]:
    pair = Pair()
    master = pair.master
    epoch = list(master.epoch or ())
    for w in range(writers):  # a writer without a replica (a Spark task): one write each
        master.handle(["write", f"job-{w}/batch-0/part-0", 1, "e" * 32, Put(("row", w), w).to_wire(), epoch], pair.now)
    pair.exchange()
    answered = 0
    t = time.process_time()
    for i in range(rounds):
        pair.now += 0.0001
        master.write(Put("x", i), pair.now)
        answered += pair.exchange()
    us = (time.process_time() - t) / rounds * 1e6
    if answered != rounds:
        raise RuntimeError(f"{answered} of {rounds} writes answered")
    return {"writers": writers, "rounds": rounds, "us_per_round": round(us, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", default="10,1000,10000", help="writers heard, comma separated (the first: baseline)")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "master_writers.json"))
    args = parser.parse_args()
    rows = [run(int(w), args.rounds) for w in args.writers.split(",")]
    base = rows[0]["us_per_round"]
    for r in rows:
        r["ratio"] = round(r["us_per_round"] / base, 2)
    print(f"one write of the master's own, durability one: write, log, ack, answer (CPU µs, {args.rounds} rounds)")
    print(f"{'writers heard':>14} {'us/round':>10} {'x baseline':>11}")
    for r in rows:
        print(f"{r['writers']:>14,} {r['us_per_round']:>10.1f} {r['ratio']:>11.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
