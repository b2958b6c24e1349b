"""Snapshot joins of an elected store only: bench/elected_store.py's join rows, without the write rows.

A store of N keys (100-byte values) is written into the master's SQLite file beforehand; a new replica
(not a candidate) joins with the memory and/or the SQLite backend. Prints join time, keys/s, the
peak RSS of the master and the joiner, and the master's and the joiner's longest event-loop stall
during the join (a 2 ms sleep that came back late: no heartbeat, no keepalive meanwhile)
(bench/elected_store.py's ``join_rows``, reused).
Run: ``python bench/elected_join.py [--sizes 10000,1000000] [--backends memory,sqlite,disk] [--master-resident disk]
[--random-keys]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import elected_store  # noqa: E402 - bench/ is this script's own directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,1000000", help="store sizes, comma separated")
    parser.add_argument("--backends", default="memory,sqlite",
                        help="the joiner's backends, comma separated: memory, sqlite (entries in memory, the file "
                             "their copy), disk (entries kept in the SQLite file only)")
    parser.add_argument("--master-resident", choices=["memory", "disk"], default="memory",
                        help="where the master keeps its entries (its SQLite file, or memory as well)")
    parser.add_argument("--cycle", type=float, default=2.0)
    parser.add_argument("--gap", type=float, default=0.5)
    parser.add_argument("--join-timeout", type=float, default=1800.0)
    parser.add_argument("--random-keys", action="store_true",
                        help="the store's keys begin with a random hex string (UUID-like) instead of k<i>")
    parser.add_argument("--max-packet", type=int, default=268_435_455)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    from broker_mqtt import EmbeddedBroker

    rows = []
    with EmbeddedBroker(max_packet_size=args.max_packet) as broker, tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            rows += elected_store.join_rows(broker.url, n, args.backends.split(","), Path(tmp), args,
                                            master_resident=args.master_resident)
    print(f"{'case':32} {'join s':>7} {'keys/s':>9} {'master MB':>14} {'joiner MB':>14} {'stall s':>13}  "
          f"via / snapshots")
    for r in rows:
        case = f"{r['keys']:,} keys, joiner {r['joiner_backend']}" + (
            ", master disk" if r.get("master_resident") == "disk" else "")
        if "error" in r:
            print(f"{case:32} failed: {r['error']}")
            continue
        f = elected_store._fmt
        print(f"{case:32} {r['join_s']:>7.2f} {f(r['keys_per_s']):>9} "
              f"{f(r['master_before_mb']):>5} -> {f(r['master_peak_mb']):>5} "
              f"{f(r['joiner_before_mb']):>5} -> {f(r['joiner_peak_mb']):>5} "
              f"{r['master_stall_s']:>6.2f} {r['joiner_stall_s']:>6.2f}  {r['via']} {r['stats']['snapshots_installed']}")
    print("(MB: resident before the join -> peak during it; stall s: the master's and the joiner's longest "
          "event-loop stall during it)")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
