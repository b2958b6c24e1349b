"""``broker-mqtt bench``: run the benchmarks under bench/ and show their tables.

The benchmarks live in the source checkout (bench/, next to the package), not in an installed
wheel; each prints its table, writes JSON to bench/results/ and runs its baseline in the same run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from .common import EXIT_CHECK_FAILED, fail

BENCH = Path(__file__).resolve().parent.parent / "bench"
#: name -> (script, what it measures); the order is the order of ``bench all``
BENCHMARKS = {
    "pubsub": ("pubsub.py", "publish/subscribe throughput and latency, beside raw aiomqtt"),
    "store": ("store.py", "master/clone store operations, beside raw endpoint messages"),
    "failover": ("failover.py", "elected-store failover and migrations, beside a stable master"),
    "election": ("election.py", "actor failover, simulated kills and real SIGKILLs"),
    "elected": ("elected_store.py", "elected-store writes, latency and snapshot joins, beside master/clone"),
    "signing": ("signing.py", "sealing and checking signed batches, beside decoding them"),
    "fuzz": ("fuzz.py", "every network decoder over a million generated and mutated inputs"),
    "queue": ("work_queue.py", "work queue publish->accept and redelivery, beside elected-store puts"),
    "spark": ("spark_emit.py", "Spark rows/s through the bridge, beside a paho baseline (spark extra)"),
    "rejoin": ("rejoin.py", "network heal -> reconnected, under random overlapping cuts"),
    "chaos": ("chaos.py", "store, queue and pub/sub under kill -9, SIGSTOP, broker crashes and cuts"),
}


@click.command()
@click.argument("names", nargs=-1, type=click.Choice(["all", *BENCHMARKS]))
@click.option("--list", "list_only", is_flag=True, help="List the benchmarks and exit.")
def bench(names: tuple[str, ...], list_only: bool) -> None:
    """Run benchmarks (default: pubsub; `all` for every one) and print their tables."""
    if list_only:
        for name, (script, what) in BENCHMARKS.items():
            click.echo(f"{name:10} bench/{script:16} {what}")
        return
    if not BENCH.is_dir():
        fail(f"no bench/ next to the package ({BENCH}): run from a source checkout", 2)
    chosen = list(BENCHMARKS) if "all" in names else list(names or ["pubsub"])
    failed = []
    for name in chosen:
        path = BENCH / BENCHMARKS[name][0]
        click.echo(f"== {name}: bench/{path.name}", err=True)
        if subprocess.run([sys.executable, str(path)], check=False).returncode != 0:
            failed.append(name)
    if failed:
        fail(f"benchmarks failed: {', '.join(failed)}", EXIT_CHECK_FAILED)
