"""Fuzz every decoder that reads from the network: ``--inputs`` inputs in all (default 1,000,000), in-process.

The targets and input generators are ``tests/fuzz_targets.py``'s (also run, briefly, by
``tests/test_fuzz_decoders.py``): each decoder is fed the raw bytes of one MQTT payload, as its receiver
feeds it. The inputs are random bytes, byte-level mutations of valid encodings (bit flips, CBOR heads
declaring huge lengths, truncation, insertion, splices) and structured mutations of valid wire values
(a field replaced by a hostile value: wrong type, huge int, NaN, deep nesting, a long list, an unknown
kind; a field dropped or added), split evenly over the targets and seeded (``--seed``).

Each input ends as *accepted*, *rejected* (the decoder's documented decode error, or its documented
"malformed" result) or an *other failure*: any other exception, printed with a reproducer (the input
in hex); any other failure makes the exit code 1. ``slowest ms``: the longest single input (a hang
shows there). The baseline row per target: its valid messages decoded in a loop, so ``x valid`` (the
fuzz rate over the valid rate) survives a noisy machine. Prints a table and writes
bench/results/fuzz.json. Run: ``python bench/fuzz.py [--inputs N] [--seed S] [--target NAME]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fuzz_targets import TARGETS, Target, generate  # noqa: E402 - after the sys.path lines

MAX_REPORTED = 3  # failures printed per target


def baseline(target: Target, encodings: list[bytes], seconds: float = 0.3) -> float:
    """Valid inputs decoded per second (every valid encoding in turn, for about ``seconds``)."""
    n, start = 0, time.perf_counter()
    while True:
        for data in encodings:
            if not target.outcome(data):
                raise AssertionError(f"{target.name}: a valid input is rejected: {data.hex()}")
        n += len(encodings)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed


def fuzz(target: Target, inputs: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    encodings = target.encodings()
    valid_rate = baseline(target, encodings)
    accepted = rejected = 0
    failures: list[tuple[bytes, str]] = []
    kinds: dict[str, int] = {}
    busy = slowest = 0.0
    clock = time.perf_counter
    for _ in range(inputs):
        data = generate(target, rng, encodings)
        t0 = clock()
        try:
            ok = target.outcome(data)
        except Exception as exc:  # noqa: BLE001 - the point: any other failure is reported
            t1 = clock()
            where = traceback.extract_tb(exc.__traceback__)[-1]
            kind = f"{type(exc).__name__} at {Path(where.filename).name}:{where.lineno}"
            kinds[kind] = kinds.get(kind, 0) + 1
            if len(failures) < MAX_REPORTED:
                failures.append((data, f"{kind}: {str(exc)[:200]}"))
        else:
            t1 = clock()
            if ok:
                accepted += 1
            else:
                rejected += 1
        busy += t1 - t0
        slowest = max(slowest, t1 - t0)
    rate = inputs / busy if busy else 0.0
    return {"inputs": inputs, "accepted": accepted, "rejected": rejected, "other_failures": sum(kinds.values()),
            "failure_kinds": kinds, "reproducers": [{"hex": d.hex(), "error": e} for d, e in failures],
            "inputs_per_s": round(rate), "valid_per_s": round(valid_rate),
            "ratio_to_valid": round(rate / valid_rate, 3) if valid_rate else None,
            "slowest_ms": round(slowest * 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="inputs in all, split over the targets")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target", action="append", help="only this target (repeatable; a name's prefix)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fuzz.json"))
    args = parser.parse_args()

    targets = [t for t in TARGETS if not args.target or any(t.name.startswith(p) for p in args.target)]
    if not targets:
        parser.error(f"no target matches {args.target}; targets: {[t.name for t in TARGETS]}")
    per = -(-args.inputs // len(targets))
    results: dict[str, dict[str, Any]] = {}
    print(f"{len(targets)} targets, {per:,} inputs each, seed {args.seed}")
    print(f"{'target':40} {'inputs':>9} {'accepted':>9} {'rejected':>9} {'other':>6} {'inputs/s':>9} "
          f"{'valid/s':>9} {'x valid':>7} {'slowest ms':>10}")
    started = time.perf_counter()
    for i, target in enumerate(targets):
        r = fuzz(target, per, args.seed * 1000 + i)
        results[target.name] = r
        print(f"{target.name:40} {r['inputs']:9,} {r['accepted']:9,} {r['rejected']:9,} {r['other_failures']:6,} "
              f"{r['inputs_per_s']:9,} {r['valid_per_s']:9,} {r['ratio_to_valid']:7.2f} {r['slowest_ms']:10.1f}",
              flush=True)
    total = sum(r["inputs"] for r in results.values())
    failed = sum(r["other_failures"] for r in results.values())
    print(f"{total:,} inputs in {time.perf_counter() - started:.0f} s; other failures: {failed}")
    for name, r in results.items():
        for kind, count in r["failure_kinds"].items():
            print(f"FAIL {name}: {kind} ({count}x)")
        for rep in r["reproducers"]:
            print(f"  reproducer ({rep['error']}): {rep['hex']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"inputs": total, "seed": args.seed, "other_failures": failed, "results": results},
                              indent=2) + "\n")
    print(f"wrote {out}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
