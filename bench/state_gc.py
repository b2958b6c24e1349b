"""What an elected store's state costs Python's garbage collector, as the store grows.

A replica holds its whole state in memory (``broker_mqtt.store.versioned.VersionedState``). A full
(generation 2) collection walks every object the collector tracks, and it comes again whenever the
objects promoted since the last one reach a quarter of those it walked; under a steady write load a
replica's log records (``log_keep`` of them, each living about a second) keep promoting, so full
collections keep coming. If the state holds a tracked object per key, each of them walks the whole
store, and a busy replica pauses for longer the more it holds (a follower paused past an election's
``gap`` bids against a live master).

For each size: a state of ``N`` keys (string keys, int values, as ``bench/elected_store.py`` writes),
applied record by record and committed, then

- **state**: a full collection with the state alive (best of ``--repeat``);
- **baseline**: a full collection with ``N`` keys held as a ``Version`` object per key in a dict
  (``packed key -> (key, Version)``, how a replica held them before), same run;
- **apply**: CPU µs per applied put while the state grows, a 20,000-record log kept beside it as a
  replica keeps one (garbage collection included, as a replica pays it).

Prints a table and writes bench/results/state_gc.json.
Run: ``python bench/state_gc.py [--keys 100000,1000000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker_mqtt.store.packing import pack  # noqa: E402
from broker_mqtt.store.versioned import Record, Version, VersionedState  # noqa: E402

LOG_KEEP = 20_000
EPOCH = (1, "m")


def full_collection_ms(repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        gc.collect()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def build_state(n: int) -> tuple[VersionedState, float]:
    """A state of ``n`` keys, one put per record, a commit per 100 records; and CPU µs per put."""
    state = VersionedState()
    log: collections.deque[Record] = collections.deque(maxlen=LOG_KEEP)
    origins = ("node-a", "node-b", "node-c")
    t = time.process_time()
    for i in range(n):
        record = Record(i + 1, EPOCH, 1_000_000 + i, origins[i % 3], "w", i + 1, ("put", f"k{i}", i, None))
        state.apply(record)
        log.append(record)
        if i % 100 == 99:
            state.commit()
    state.commit()
    return state, (time.process_time() - t) / n * 1e6


def build_baseline(n: int) -> dict[bytes, tuple[Any, Version]]:
    return {pack(f"k{i}"): (f"k{i}", Version(i, 1_000_000 + i, "node-a", i + 1)) for i in range(n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="100000,1000000", help="comma-separated state sizes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "state_gc.json"))
    args = parser.parse_args()
    sizes = [int(x) for x in args.keys.split(",")]
    rows = []
    for n in sizes:
        gc.collect()
        empty_ms = full_collection_ms(args.repeat)
        state, apply_us = build_state(n)
        state_ms = full_collection_ms(args.repeat)
        assert len(state) == n and state.get(f"k{n - 1}") == n - 1
        del state
        baseline = build_baseline(n)
        baseline_ms = full_collection_ms(args.repeat)
        assert len(baseline) == n
        del baseline
        rows.append({"keys": n, "empty_ms": round(empty_ms, 2), "state_ms": round(state_ms, 2),
                     "baseline_ms": round(baseline_ms, 2), "ratio": round(state_ms / baseline_ms, 3),
                     "apply_us": round(apply_us, 2)})
    print(f"full (generation 2) collection, best of {args.repeat}; baseline: a Version object per key")
    print(f"{'keys':>10} {'no state ms':>12} {'state ms':>10} {'baseline ms':>12} {'x baseline':>11} {'apply us/put':>13}")
    for r in rows:
        print(f"{r['keys']:>10,} {r['empty_ms']:>12.2f} {r['state_ms']:>10.2f} {r['baseline_ms']:>12.2f} "
              f"{r['ratio']:>11.3f} {r['apply_us']:>13.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"repeat": args.repeat, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
