#!/usr/bin/env python3
"""Run a command several times in a row while another process keeps one core busy.

    python .ci/stress.py [--runs N] [--busy N] -- COMMAND...

CI machines are busy 2-core machines: a test that passes only when it has the machine to itself is a
flaky test. This runs COMMAND (by default the whole suite) ``--runs`` times in a row, each with
``--busy`` processes spinning on the CPU beside it (one by default: on 2 cores, half the machine),
stops at the first failure, and prints each run's wall time. Exit status: 0 when every run passed,
else the failing run's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import time


def spin() -> None:
    """Keep one core busy until killed."""
    x = 0
    while True:
        x = (x * 31 + 7) % 1_000_003


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs in a row (default 3)")
    parser.add_argument("--busy", type=int, default=1, help="processes spinning beside each run (default 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command (after --)")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    times: list[float] = []
    for run in range(1, args.runs + 1):
        spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
        for p in spinners:
            p.start()
        print(f"stress: run {run}/{args.runs} with {args.busy} busy process(es): {' '.join(command)}", flush=True)
        started = time.monotonic()
        try:
            rc = subprocess.call(command)
        finally:
            for p in spinners:
                p.kill()
                p.join()
        times.append(time.monotonic() - started)
        print(f"stress: run {run} {'passed' if rc == 0 else f'FAILED (exit {rc})'} in {times[-1]:.0f} s", flush=True)
        if rc != 0:
            return rc
    print("stress: all runs passed; wall times " + ", ".join(f"{t:.0f} s" for t in times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
