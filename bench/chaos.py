"""Chaos: an elected store, a work queue and a pub/sub stream under a random schedule of faults.

``--nodes`` (3-5) node processes (tests/chaos_node.py), each holding a replica of elected store
``chaos-store`` and work queue ``chaos-queue`` and publishing/subscribing a pub/sub stream, each
behind its own cuttable TCP relay (tests/transport/cuttable.py) to one mosquitto with persistence
(the embedded broker: ``persistence true``, autosave every 60 s). Every node writes to the store
(pushes onto its own list), publishes to the queue, consumes from it (accepting), and publishes 50
sequence-numbered messages a second on the stream while subscribing to it.

Faults, one after the other, seeded (``--seed``), ``--faults`` of them, kinds in shuffled rounds:

* ``kill_master``: SIGKILL the store master's process; a new node process (a fresh, empty replica)
  starts in its place 0.5-2 s later;
* ``stop``: SIGSTOP a random node for 1-6 s, then SIGCONT (a hung node: its sockets stay open);
* ``broker``: SIGKILL mosquitto (no save), restart it 0.5-3 s later on the same port with the same
  persistence directory (skipped with ``--broker``; ``--broker url1,url2`` spreads the nodes over
  the nodes of a clustered broker, node i through the (i mod n)th);
* ``cut``: a node's relay goes down (links cut, new ones refused) for 1-6 s, then heals.

Accounting, after the last fault healed: *settle* is the time until every live node had a store write
and a queue publish acknowledged again; then every node stops producing (SIGUSR1), the queue is
drained (messages held by killed consumers come back when their lease expires; the drain ends as
soon as every message is accounted for as below, ``drain_s``, or after 75 s, ``drained`` false),
and every live replica dumps. Stores: the replicas must be identical and every acknowledged push
(of every node process, killed ones included) present; lost = acknowledged but absent; duplicated = present twice.
Queues: every message whose publish was acknowledged must be accepted exactly once or dead-lettered;
lost = neither; duplicated = accepted more than once. Pub/sub (at-least-once while sessions live,
docs/guarantees.md): per subscriber and sender, lost = sequence numbers missing between the first
and last received (and past the last, for senders alive at the end; before the first, for senders
that started after the subscriber); reported = what the endpoints reported as ``MessagesMissed``
(when this tree has it); duplicated = received more than once.

Prints a table, writes bench/results/chaos.json (``--out``), exits 1 when a store or queue write was
lost (a queue message whose accept raised is not counted: it may be gone) or the replicas differ. ``--quick``: 3 nodes, 5 faults, shorter pauses (the suite runs it).
The queue's figures include the accepts that raised (``failed_accepts``: outcome unknown, the
message may be gone though no ACCEPTED was printed; ``lost_after_a_failed_accept`` counts the lost
messages among them) and the accepts answered ``NotHeld``. ``CHAOS_RAW=/some/prefix`` keeps every
node's lines in ``<prefix>-slot<i>-<start>.out``, to trace a lost message afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "transport"))

from cuttable import CuttableRelay  # noqa: E402 - the suite's relay
from line_procs import LineProc, wait_for  # noqa: E402 - the suite's node processes

from broker_mqtt import EmbeddedBroker  # noqa: E402

NODE = ROOT / "tests" / "chaos_node.py"
KINDS = ("kill_master", "stop", "broker", "cut")


class ChaosNode(LineProc):
    """One node process and what it printed."""

    dump_timeout = 60.0

    def __init__(self, slot: int, url: str, namespace: str, *, election: tuple[float, float], stderr: Any) -> None:
        self.slot = slot
        self.started = time.monotonic()
        self.ep: str | None = None
        self.ep_time = 0.0
        self.acks: list[tuple[int, float]] = []
        self.published: list[tuple[str, int, int, float]] = []  # (tag, i, id, time)
        self.accepted: list[tuple[int, Any, float]] = []
        self.accepting: list[tuple[int, Any]] = []
        self.masters: list[tuple[int, str, float]] = []  # the store's, as this node saw them
        self.qmasters: list[tuple[int, str, float]] = []  # the queue's
        self.conflicts: list[tuple[str, float, str]] = []
        self.missed: list[tuple[str, int]] = []
        self.fails: Counter[str] = Counter()
        self.afails: list[int] = []  # ids whose accept raised (AFAIL: its outcome unknown)
        self.quiets = 0
        raw = os.environ.get("CHAOS_RAW")  # a path prefix: each node's lines (but DUMP) kept in a file of its own
        self._raw = open(f"{raw}-slot{slot}-{time.monotonic():.3f}.out", "w") if raw else None  # noqa: SIM115
        cmd = [sys.executable, str(NODE), url, namespace, "--name", f"n{slot}",
               "--cycle", str(election[0]), "--gap", str(election[1])]
        super().__init__(cmd, stderr=stderr)

    def _take(self, line: str) -> None:
        if self._raw is not None and not line.startswith("DUMP"):
            self._raw.write(line)
            self._raw.flush()
        super()._take(line)

    def _line(self, kind: str, rest: str) -> None:
        parts = rest.split(" ")
        if kind == "ACK":
            self.acks.append((int(parts[0]), float(parts[1])))
        elif kind == "PUBLISHED":
            self.published.append((parts[0], int(parts[1]), int(parts[2]), float(parts[3])))
        elif kind == "ACCEPTED":
            msg_id, data, t = rest.split(" ", 1)[0], *rest.split(" ", 1)[1].rsplit(" ", 1)
            self.accepted.append((int(msg_id), json.loads(data), float(t)))
        elif kind == "MASTER":
            self.masters.append((int(parts[0]), parts[1], float(parts[2])))
        elif kind == "QMASTER":
            self.qmasters.append((int(parts[0]), parts[1], float(parts[2])))
        elif kind == "CONFLICT":
            self.conflicts.append((parts[0], float(parts[1]), parts[2]))
        elif kind == "EP":
            self.ep, self.ep_time = parts[0], float(parts[1])
        elif kind == "MISSED":
            if parts[1].startswith("/chaos/ps"):  # not the gaps in store and queue commands
                self.missed.append((parts[0], int(parts[2])))
        elif kind == "ACCEPTING":
            msg_id, data = rest.split(" ", 1)
            self.accepting.append((int(msg_id), json.loads(data)))
        elif kind == "QUIET":
            self.quiets += 1
        elif kind == "AFAIL":
            self.afails.append(int(parts[0]))
            self.fails[kind] += 1
        else:
            self.fails[kind] += 1

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def quiet(self) -> None:
        self.proc.send_signal(signal.SIGUSR1)


class Chaos:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.namespace = f"chaos{os.getpid()}"
        self.tmp = Path(tempfile.mkdtemp(prefix="chaos-"))
        self.broker: EmbeddedBroker | None = None
        self.userinfo = ""  # user:password@ of --broker, kept for the nodes (ejabberd needs them)
        if args.broker:
            # a comma-separated list (the nodes of a clustered broker): node slot i goes through the
            # (i mod n)th, so the store, queue and stream span the cluster's nodes
            targets = []
            for url in args.broker.split(","):
                u = urlsplit(url.strip())
                targets.append((u.hostname or "127.0.0.1", u.port or 1883))
                if u.username is not None:
                    self.userinfo = u.netloc.rsplit("@", 1)[0] + "@"
        else:
            self.broker = EmbeddedBroker()
            self.broker.start()
            targets = [("127.0.0.1", self.broker.port)]
        self.relays = [CuttableRelay(targets[i % len(targets)][1], host=targets[i % len(targets)][0])
                       for i in range(args.nodes)]
        self.slots: list[ChaosNode] = []
        self.every: list[ChaosNode] = []  # every node process ever started
        self.faults: list[dict[str, Any]] = []
        self.t0 = self.healed = time.monotonic()

    def url(self, slot: int) -> str:
        return f"mqtt://{self.userinfo}127.0.0.1:{self.relays[slot].port}"

    def spawn(self, slot: int) -> ChaosNode:
        err = (self.tmp / f"node{len(self.every)}-slot{slot}.err").open("w")
        node = ChaosNode(slot, self.url(slot), self.namespace, election=(self.args.cycle, self.args.gap), stderr=err)
        err.close()
        self.every.append(node)
        return node

    def master(self) -> ChaosNode | None:
        seen = [m for n in self.slots if n.alive for m in n.masters]
        if not seen:
            return None
        term, master_id, _ = max(seen)
        return next((n for n in self.slots if n.node_id == master_id and n.alive), None)

    def pause(self, low: float, high: float) -> float:
        d = self.rng.uniform(low, high) * (0.5 if self.args.quick else 1.0)
        time.sleep(d)
        return d

    def fault(self, kind: str) -> dict[str, Any]:
        rng = self.rng
        at = time.monotonic()
        record: dict[str, Any] = {"kind": kind, "at": round(at - self.t0, 2)}
        if kind == "kill_master":
            victim = self.master()
            if victim is None:
                victim = self.slots[rng.randrange(len(self.slots))]
                record["note"] = "no master known: a random node"
            record["node"] = victim.node_id
            victim.kill()
            self.pause(0.5, 2.0)
            self.slots[victim.slot] = self.spawn(victim.slot)
            self.healed = time.monotonic()  # the replacement is starting: settling counts from here
            self.slots[victim.slot].wait_ready(60)
            record["healed"] = round(self.healed - self.t0, 2)
            return record
        elif kind == "stop":
            victim = self.slots[rng.randrange(len(self.slots))]
            record["node"] = victim.node_id
            victim.stop()
            record["for"] = round(self.pause(1.0, 6.0), 2)
            victim.cont()
        elif kind == "broker":
            assert self.broker is not None
            self.broker.kill()
            record["for"] = round(self.pause(0.5, 3.0), 2)
            self.broker.start()
        elif kind == "cut":
            slot = rng.randrange(len(self.slots))
            record["node"] = self.slots[slot].node_id
            self.relays[slot].down()
            record["for"] = round(self.pause(1.0, 6.0), 2)
            self.relays[slot].up()
        self.healed = time.monotonic()
        record["healed"] = round(self.healed - self.t0, 2)
        return record

    def schedule(self) -> list[str]:
        kinds = [k for k in self.args.kinds.split(",") if k != "broker" or self.broker is not None]
        out: list[str] = []
        while len(out) < self.args.faults:
            round_ = list(kinds)
            self.rng.shuffle(round_)
            out += round_
        return out[: self.args.faults]

    def run(self) -> dict[str, Any]:
        args = self.args
        self.slots = [self.spawn(i) for i in range(args.nodes)]
        for n in self.slots:
            n.wait_ready(60)
        if not wait_for(lambda: self.master() is not None and all(n.acks for n in self.slots), 120):
            raise RuntimeError("no store master, or a node without acknowledged writes, after 120 s")
        for kind in self.schedule():
            self.pause(2.0, 5.0)
            self.faults.append(self.fault(kind))
            print(f"  fault {len(self.faults):2d}: {self.faults[-1]}", flush=True)
        last = self.healed
        settled = wait_for(lambda: all(
            any(t > last for _, t in n.acks) and any(p[3] > last for p in n.published) for n in self.slots), 180)
        settle = time.monotonic() - last if settled else None
        time.sleep(1.0)
        for n in self.slots:
            n.quiet()
        if not wait_for(lambda: all(n.quiets for n in self.slots), 120):
            raise RuntimeError("a node did not go quiet")
        drain_start = time.monotonic()
        drained = self.drain(60 + 3 * 5.0)
        drain_s = time.monotonic() - drain_start
        deadline = time.monotonic() + 30  # the last records reach every replica a little after the writers went quiet
        while not self._same(dumps := [n.dump() for n in self.slots]) and time.monotonic() < deadline:
            time.sleep(0.5)
        return self.account(dumps, settle, drained, drain_s, last)

    @staticmethod
    def _same(dumps: list[dict[str, Any]]) -> bool:
        return all(d["contents"] == dumps[0]["contents"] for d in dumps[1:])

    def unaccepted(self) -> set[tuple[str, int]]:
        published = {(p[0], p[1]) for n in self.every for p in n.published}
        accepted = {(a[1][0], a[1][1]) for n in self.every for a in n.accepted}
        return published - accepted

    def outcome_unknown(self) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
        """The messages (their data) in an accept whose outcome is unknown, which may have gone through
        printing nothing: one its consumer was killed during (ACCEPTING, no ACCEPTED: these include
        the messages it did accept), and one that raised (AFAIL)."""
        killed = {tuple(a[1]) for n in self.every if not n.alive for a in n.accepting}
        failed_ids = {i for n in self.every for i in n.afails}
        failed = {(p[0], p[1]) for n in self.every for p in n.published if p[2] in failed_ids}
        return killed, failed

    @staticmethod
    def _held(dumps: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
        """The messages some replica still holds (ready or acquired): they can still be accepted."""
        return {tuple(x[4]) for d in dumps for x in d["queue"]["live"]}

    @staticmethod
    def _dead(dumps: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
        return {tuple(x[1]) for d in dumps for x in d["queue"]["dead_letters"]}

    def undrained(self, dumps: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
        """The messages the drain still waits for, as :meth:`account` counts them: neither accepted
        nor dead-lettered, nor in an accept whose outcome is unknown and held by no replica (such a
        one never comes back: its accept went through, or it is lost, and the tally counts it as
        such; one still held comes back when its lease runs out)."""
        killed, failed = self.outcome_unknown()
        return self.unaccepted() - self._dead(dumps) - ((killed | failed) - self._held(dumps))

    def drain(self, timeout: float) -> bool:
        """Wait until every acknowledged queue message is accounted for (:meth:`undrained`): the
        nodes' lines tell when every one was accepted; while some are not, the live replicas dump
        (once a second) to tell which of them will never come back."""
        deadline = time.monotonic() + timeout
        next_dump = time.monotonic()
        while self.unaccepted():
            now = time.monotonic()
            if now >= next_dump:
                next_dump = now + 1.0
                if not self.undrained([n.dump() for n in self.slots]):
                    return True
            if now >= deadline:
                return False
            time.sleep(0.05)
        return True

    def account(self, dumps: list[dict[str, Any]], settle: float | None, drained: bool, drain_s: float,
                last: float) -> dict[str, Any]:
        reference = dumps[0]["contents"]
        replicas_equal = self._same(dumps)
        differences = []  # per replica that differs from the first: key -> (lengths, last items) of both
        for n, d in zip(self.slots[1:], dumps[1:], strict=True):
            keys = set(reference) | set(d["contents"])
            differences.append({"node": n.node_id, "master": d["is_master"], "epoch": d["epoch"], "keys": {
                k: [[len(x), x[-3:]] if isinstance(x, list) else x for x in (reference.get(k), d["contents"].get(k))]
                for k in sorted(keys) if reference.get(k) != d["contents"].get(k)}})
        store_acked = store_lost = store_dup = 0
        for n in self.every:
            got = reference.get(json.dumps(f"log-{n.node_id}"), [])
            acked = {i for i, _ in n.acks}
            store_acked += len(acked)
            store_lost += len(acked - set(got))
            store_dup += len(got) - len(set(got))
        # queue messages are told apart by their data ([tag, i]: one per acknowledged publish)
        dead = self._dead(dumps)
        published = {(p[0], p[1]): (p[2], n.node_id, round(p[3] - self.t0, 2)) for n in self.every
                     for p in n.published}
        accepted = Counter(tuple(a[1]) for n in self.every for a in n.accepted)
        where: dict[tuple[Any, ...], list[Any]] = {}
        for n in self.every:
            for msg_id, data, t in n.accepted:
                where.setdefault(tuple(data), []).append((msg_id, n.node_id, round(t - self.t0, 2)))
        # a consumer killed during its accept printed no ACCEPTED: if the queue no longer holds the
        # message, the accept went through (or the message is lost: both look alike from here)
        killed, _ = self.outcome_unknown()
        unanswered = killed - set(accepted) - self._held(dumps)
        queue_lost = sorted(set(published) - set(accepted) - dead - unanswered)
        queue_dup = sum(c - 1 for c in accepted.values() if c > 1)
        ids: dict[int, set[tuple[Any, ...]]] = {}
        for data, (msg_id, _, _) in published.items():
            ids.setdefault(msg_id, set()).add(data)
        id_reused = sum(len(v) - 1 for v in ids.values() if len(v) > 1)
        # pub/sub, per live subscriber and sender
        senders = {n.ep: n for n in self.every if n.ep}
        ps_lost = ps_dup = ps_received = 0
        for n, d in zip(self.slots, dumps, strict=True):
            for sender, s in d["pubsub"].items():
                ps_received += s["received"]
                ps_dup += s["received"] - s["distinct"]
                lost = s["gaps"]
                origin = senders.get(sender)
                if origin is not None and origin.ep_time > n.ep_time:
                    lost += s["low"]  # the subscriber was there before the sender's first message
                end = next((x for x in dumps if x["me"] == sender), None)
                if end is not None:
                    lost += max(0, end["pubsub_sent"] - 1 - s["high"])
                ps_lost += lost
        reported = sum(m for n in self.slots for _, m in n.missed)  # by the live subscribers counted above
        missed_counter = sum(d["endpoint"].get("missed", 0) for d in dumps)  # all topics, store commands too
        late = sum(d["endpoint"].get("late", 0) for d in dumps)
        kinds = Counter(f["kind"] for f in self.faults)
        return {
            "seed": self.args.seed, "nodes": self.args.nodes, "election": [self.args.cycle, self.args.gap], "broker": self.args.broker or "embedded mosquitto",
            "faults": dict(kinds), "fault_log": self.faults, "node_processes": len(self.every),
            "masters": [{"slot": n.slot, "node": n.node_id, "store": [[t, m, round(x - self.t0, 2)] for t, m, x in n.masters],
                         "queue": [[t, m, round(x - self.t0, 2)] for t, m, x in n.qmasters],
                         "conflicts": [[w, round(x - self.t0, 2), k] for w, x, k in n.conflicts]} for n in self.every],
            "conflicts": sum(len(n.conflicts) for n in self.every),
            "settle_s": None if settle is None else round(settle, 2),
            "replicas_equal": replicas_equal,
            "replica_differences": {"first": [self.slots[0].node_id, dumps[0]["is_master"], dumps[0]["epoch"]],
                                    "others": [x for x in differences if x["keys"]]},
            "store": {"acked": store_acked, "lost": store_lost, "duplicated": store_dup,
                      "failed_writes": sum(n.fails["WFAIL"] for n in self.every)},
            "queue": {"acked": len(published), "accepted": sum(accepted.values()), "dead_lettered": len(dead),
                      "lost": len(queue_lost), "duplicated": queue_dup, "ids_reused": id_reused,
                      "accepted_by_a_killed_consumer": len(unanswered & set(published)),
                      "lost_samples": [[list(x), published[x]] for x in queue_lost[:20]],
                      "duplicated_samples": [[list(x), published.get(x), w] for x, w in where.items()
                                             if len(w) > 1][:20],
                      "drained": drained, "drain_s": round(drain_s, 2),
                      "failed_publishes": sum(n.fails["PFAIL"] for n in self.every),
                      "failed_accepts": sum(n.fails["AFAIL"] for n in self.every),
                      "not_held": sum(n.fails["NOTHELD"] for n in self.every),
                      # lost messages whose accept raised (outcome unknown: it may have gone through)
                      "lost_after_a_failed_accept": len({published[x][0] for x in queue_lost}
                                                        & {i for n in self.every for i in n.afails})},
            "pubsub": {"received": ps_received, "lost": ps_lost, "reported": reported,
                       "missed_counter": missed_counter, "late": late, "duplicated": ps_dup},
            "queue_replicas": [{k: d["queue"][k] for k in ("ready", "acquired", "dead", "live", "other")}
                               for d in dumps],
            "stderr_dir": str(self.tmp),
        }

    def close(self) -> None:
        for n in self.every:
            n.terminate(5)
        for r in self.relays:
            r.close()
        if self.broker is not None:
            self.broker.cleanup()


def table(r: dict[str, Any]) -> str:
    rows = [
        ("faults", ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items())) + f" (total {sum(r['faults'].values())})"),
        ("node processes (election cycle, gap)", f"{r['node_processes']} ({r['election'][0]:g} s, {r['election'][1]:g} s)"),
        ("time to settle after the last fault", "-" if r["settle_s"] is None else f"{r['settle_s']:.1f} s"),
        ("time to drain the queue", f"{r['queue']['drain_s']:.1f} s" + ("" if r["queue"]["drained"] else " (not drained)")),
        ("store: acknowledged writes", str(r["store"]["acked"])),
        ("store: lost / duplicated", f"{r['store']['lost']} / {r['store']['duplicated']}"),
        ("store: replicas identical", "yes" if r["replicas_equal"] else "NO"),
        ("queue: acknowledged publishes", str(r["queue"]["acked"])),
        ("queue: accepted / dead-lettered", f"{r['queue']['accepted']} / {r['queue']['dead_lettered']}"
                                            f" (+{r['queue']['accepted_by_a_killed_consumer']} accepted as its"
                                            " consumer was killed)"),
        ("queue: lost / duplicated", f"{r['queue']['lost']} / {r['queue']['duplicated']}"),
        ("queue: message ids given twice", str(r["queue"]["ids_reused"])),
        ("pub/sub: received", str(r["pubsub"]["received"])),
        ("pub/sub: lost / reported", f"{r['pubsub']['lost']} / {r['pubsub']['reported']}"),
        ("pub/sub: duplicated", str(r["pubsub"]["duplicated"])),
    ]
    width = max(len(a) for a, _ in rows)
    return "\n".join(f"{a.ljust(width)}  {b}" for a, b in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", help="run against this broker (mqtt://host:port; a comma-separated list spreads "
                                         "the nodes over a cluster's nodes); no broker faults")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--faults", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=4, choices=range(3, 6))
    parser.add_argument("--quick", action="store_true", help="3 nodes, 5 faults, shorter pauses")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds to draw from (default {','.join(KINDS)})")
    parser.add_argument("--cycle", type=float, default=3.0, help="the elections' cycle (s)")
    parser.add_argument("--gap", type=float, default=1.0, help="the elections' gap (s): claims wait max(gap, 0.5 s) "
                        "for every live replica's promise (docs/elected-stores.md)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "chaos.json")
    args = parser.parse_args()
    if set(args.kinds.split(",")) - set(KINDS):
        parser.error(f"--kinds: choose among {','.join(KINDS)}")
    if args.quick:
        args.nodes, args.faults = 3, min(args.faults, 5)
    chaos = Chaos(args)
    started = time.monotonic()
    try:
        result = chaos.run()
    finally:
        chaos.close()
    result["duration_s"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"written to {args.out}; node stderr in {result['stderr_dir']}")
    queue = result["queue"]  # (a message whose accept raised may be gone: its outcome is unknown)
    ok = result["store"]["lost"] == 0 and queue["lost"] == queue["lost_after_a_failed_accept"] and result["replicas_equal"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
