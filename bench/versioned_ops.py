"""Micro-benchmark of an elected store's replicated state (``broker_mqtt.store.versioned``).

The work-queue shape, without MQTT or processes: ``--messages`` int keys (default 50,000), each put
``ready`` (publish), put again ``acquired`` with a 41-character owner (acquire), erased (accept),
and its tombstone forgotten (``forget``); the ops of each step are batched into ``["many", ...]``
records of 20..100 ops (seeded), pipelined as a busy queue runs (publish batch b, acquire b-1, accept
b-2, forget b-3), with the ``next-id`` counter and lease puts the queue commands add, and each
record's writer and answer as the queue commands give them (acquire answers ``[[id, data, count],
...]``: a writer's last 64 answers are part of the persisted state). About ``4 * messages`` ops in
all (``--messages 50000``: 3,296 records, 201,648 ops).

Two paths, each with the memory state and with SQLite (a temp file), committing after every record
as ``Replica.to_send`` does after each input:

- master: ``compute_op`` (a ComputedCommand returning the op, as the queue commands do) + a
  ``Record`` + ``VersionedState.apply`` + ``Record.to_wire`` (the log message), as
  ``Replica._apply_write`` / ``_append`` do;
- replica: ``Record.from_wire`` of the decoded log wire (checking every op) + ``Clock.observe`` +
  ``apply``, as ``Replica._on_log`` / ``_apply_records`` do.

Baselines, same run, same ops: a plain dict loop (``d[key] = value`` / ``del``) and ``cbor2.dumps``
of every put's value (canonical, as the store packs); each figure is also given as a ratio to the
``cbor2.dumps`` baseline, which survives a noisy machine better than µs do. Times are CPU time of this
process (``time.process_time``; SQLite's fsync waits are not CPU) and wall time, best of
``--repeat``. Prints a table and writes bench/results/versioned_ops.json.
Run: ``python bench/versioned_ops.py [--messages N] [--repeat R] [--profile PATH]``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker_mqtt.store.commands import ComputedCommand  # noqa: E402 - after the sys.path line
from broker_mqtt.store.log_ops import compute_op  # noqa: E402
from broker_mqtt.store.versioned import Clock, Record, VersionedState  # noqa: E402
from broker_mqtt.store.versioned_sqlite import open_state  # noqa: E402

OWNER = "c" * 32 + "/worker-1"  # 41 characters, like "<endpoint hex>/<name>"
assert len(OWNER) == 41
EPOCH = (1, "n" * 32)
ORIGIN = "e" * 32
WALL = 1_700_000_000.0

Op = tuple[Any, ...]
Item = tuple[str, Op, Any]  # one record: (writer, op, answer)
PRODUCER, CONSUMER, MASTER = "p" * 32 + "/1", OWNER, "$forget"


def workload(messages: int, seed: int = 1) -> list[Item]:
    """Every record in log order: its writer, op (a ``("many", [...])``) and answer, as the queue
    commands give them (publish: the first id; acquire: ``[[id, data, count], ...]``; accept: a None
    per message; forget: how many)."""
    rng = random.Random(seed)
    batches: list[list[int]] = []
    next_id = 1
    while next_id <= messages:
        size = min(rng.randint(20, 100), messages - next_id + 1)
        batches.append(list(range(next_id, next_id + size)))
        next_id += size
    records: list[Item] = []
    for b in range(len(batches) + 3):
        if b < len(batches):  # publish
            ids = batches[b]
            ops: list[Op] = [("put", i, {"data": ["t", i], "state": "ready", "owner": None, "count": 0,
                                         "max": 10, "reason": None}, None) for i in ids]
            ops.append(("put", "next-id", ids[-1] + 1, None))
            records.append((PRODUCER, ("many", ops), ids[0]))
        if 0 <= b - 1 < len(batches):  # acquire
            ids = batches[b - 1]
            ops = [("put", i, {"data": ["t", i], "state": "acquired", "owner": OWNER, "count": 1, "max": 10,
                               "reason": None}, None) for i in ids]
            ops.append(("put", "lease/" + OWNER, WALL + 30.0 + b, None))
            records.append((CONSUMER, ("many", ops), [[i, ["t", i], 1] for i in ids]))
        if 0 <= b - 2 < len(batches):  # accept
            ids = batches[b - 2]
            records.append((CONSUMER, ("many", [("erase", i) for i in ids]), [None] * len(ids)))
        if 0 <= b - 3 < len(batches):  # forget (Forget asks old_tombstones; here: the batch accepted before)
            ids = batches[b - 3]
            records.append((MASTER, ("many", [("forget", i) for i in ids]), len(ids)))
    return records


def count_ops(records: list[Item]) -> int:
    return sum(len(op[1]) if op[0] == "many" else 1 for _, op, _ in records)


@dataclass(frozen=True)
class _Given(ComputedCommand):
    """A computed command whose effect is given (the queue commands' compute, minus their index)."""

    op: Op
    answer: Any

    def compute(self, state: Any, wall: float) -> tuple[Op, Any]:
        return self.op, self.answer


# -- the timed paths -----------------------------------------------------------------------------------

def run_master(state: VersionedState, records: list[Item]) -> None:
    clock = Clock(lambda: WALL)
    commands = [(writer, _Given(op, answer)) for writer, op, answer in records]
    for n, (writer, cmd) in enumerate(commands, 1):
        wall = clock.now() / 1_000_000
        op, result = compute_op(state, cmd, wall)
        record = Record(state.last_seq + 1, EPOCH, clock.now(), ORIGIN, writer, n, op, result)
        state.apply(record)
        record.to_wire()
        state.commit()


def log_wires(records: list[Item]) -> list[Any]:
    """The master's log records as a replica decodes them (lists, as from the CBOR codec)."""
    clock = Clock(lambda: WALL)
    wires = []
    for n, (writer, op, answer) in enumerate(records, 1):
        rec = Record(n, EPOCH, clock.now(), ORIGIN, writer, n, op, answer)
        wires.append(cbor2.loads(cbor2.dumps(rec.to_wire())))
    return wires


def run_replica(state: VersionedState, wires: list[Any]) -> None:
    clock = Clock(lambda: WALL)
    for wire in wires:
        rec = Record.from_wire(wire)
        if rec.seq == state.last_seq + 1:
            clock.observe(rec.hlc)
            state.apply(rec)
        state.commit()


def run_dict(records: list[Item]) -> None:
    d: dict[Any, Any] = {}
    for _, op, _ in records:
        for one in op[1]:
            kind = one[0]
            if kind == "put":
                d[one[1]] = one[2]
            elif kind == "erase":
                d[one[1]] = None
            else:
                del d[one[1]]


def run_cbor(records: list[Item]) -> None:
    dumps = cbor2.dumps
    for _, op, _ in records:
        for one in op[1]:
            if one[0] == "put":
                dumps(one[2], canonical=True)


# -- measuring -----------------------------------------------------------------------------------------

def measure(fn: Callable[[], None], repeat: int) -> tuple[float, float]:
    """Best (CPU, wall) seconds of ``repeat`` runs."""
    best_cpu = best_wall = float("inf")
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - w0)
    return best_cpu, best_wall


_files = iter(range(1_000_000))  # a fresh SQLite file for every run


def state_factory(backend: str, tmp: Path) -> Callable[[], VersionedState]:
    def make() -> VersionedState:
        if backend == "memory":
            return VersionedState()
        return open_state(tmp / f"state-{next(_files)}.db")
    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "versioned_ops.json"))
    parser.add_argument("--profile", metavar="PATH", help="profile one path instead: master|replica, "
                        "e.g. master-memory or replica-sqlite")
    args = parser.parse_args()

    records = workload(args.messages)
    ops = count_ops(records)
    wires = log_wires(records)

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        if args.profile:
            path, backend = args.profile.split("-")
            state = state_factory(backend, tmp)()
            prof = cProfile.Profile()
            prof.enable()
            run_master(state, records) if path == "master" else run_replica(state, wires)
            prof.disable()
            state.close()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            return

        def timed(path: str, backend: str) -> tuple[float, float]:
            make = state_factory(backend, tmp)
            states: list[VersionedState] = []

            def once() -> None:
                state = make()
                states.append(state)
                run_master(state, records) if path == "master" else run_replica(state, wires)
            try:
                return measure(once, args.repeat)
            finally:
                for s in states:
                    s.close()

        results: dict[str, dict[str, float]] = {}
        base_cpu, base_wall = measure(lambda: run_cbor(records), args.repeat)
        dict_cpu, dict_wall = measure(lambda: run_dict(records), args.repeat)
        rows: list[tuple[str, float, float]] = [("baseline: cbor2.dumps of each put's value", base_cpu, base_wall),
                                                ("baseline: plain dict loop", dict_cpu, dict_wall)]
        for path in ("master", "replica"):
            for backend in ("memory", "sqlite"):
                cpu, wall = timed(path, backend)
                rows.append((f"{path} ({backend})", cpu, wall))

    base_us = base_cpu / ops * 1e6
    print(f"{len(records)} records, {ops} ops ({args.messages} messages), best of {args.repeat}")
    print(f"{'path':44} {'CPU us/op':>10} {'wall us/op':>11} {'x cbor2':>8}")
    for name, cpu, wall in rows:
        us, wus = cpu / ops * 1e6, wall / ops * 1e6
        print(f"{name:44} {us:10.2f} {wus:11.2f} {us / base_us:8.1f}")
        results[name] = {"cpu_us_per_op": round(us, 3), "wall_us_per_op": round(wus, 3),
                         "ratio_to_cbor2": round(us / base_us, 2)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"messages": args.messages, "records": len(records), "ops": ops,
                               "repeat": args.repeat, "results": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
