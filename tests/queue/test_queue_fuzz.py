"""Work-queue commands fuzzed on elected-store replicas (``tests/store/test_elected_fuzz_more.py``'s
harness: migrations, kills, pauses, and a node dying right after sending a claim, an active, a log
message or a wack that reaches some replicas only; no splits, no lost messages).

The writes are the queue's: a ``Publish`` of one fresh item, an ``Acquire`` of up to 3 with a lease
far longer than the case (so a message never comes back by its lease), and a ``Settle`` accepting
what the node's process acquired. Checked once settled (``docs/queues.md``): no item is handed out
by two acknowledged acquires (at most once while its lease lasts); every acknowledged publish's item
is still there (ready, acquired, or done once accepted), and once only; every acknowledged accept
left its item done or gone, never ready or acquired; and the replicas converge. (200 seeds passed.)
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from broker_mqtt.queue.commands import Acquire, Publish, Settle
from broker_mqtt.queue.model import MessageRecord, MessageState, new_marker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "store"))
from test_elected_fuzz import SAFE_KINDS, Write  # noqa: E402
from test_elected_fuzz_more import CRASH_KINDS, MoreFuzz, MoreNet  # noqa: E402

SEEDS = range(int(os.environ.get("BROKER_MQTT_QUEUE_FUZZ_SEEDS", "30")))
LEASE = 10_000.0


class QueueFuzz(MoreFuzz):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held: dict[int, list[list[Any]]] = {}  # id(Node) -> [msg id, item, count] acquired, not settled

    def write_some(self) -> None:
        writers = self.live()
        for _ in range(self.rng.randint(0, 2)):
            if not writers:
                return
            name = self.rng.choice(writers)
            node = self.net.nodes[name]
            roll = self.rng.random()
            mine = self._acquired(node)
            if roll < 0.4:
                self.fresh += 1
                item = f"m{self.fresh}"
                command: Any = Publish([item], None, new_marker())
                kind, key, value = "publish", item, None
            elif roll < 0.75 or not mine:
                command = Acquire(node.replica.id, self.rng.randint(1, 3), LEASE)
                kind, key, value = "acquire", "", None
            else:
                items = mine[: self.rng.randint(1, len(mine))]
                command = Settle(node.replica.id, [[m[0], "accept", None, m[2]] for m in items])
                kind, key, value = "accept", "", items
                settled = self.held.setdefault(id(node), [])
                settled.extend(m[0] for m in items)
            n = self.net.write(name, command)
            self.writes.append(Write(node, n, kind, key, value))

    def _acquired(self, node: Any) -> list[list[Any]]:
        """What ``node``'s process acquired (answered) and has not settled yet."""
        settled = set(self.held.get(id(node), []))
        out: list[list[Any]] = []
        for w in self.writes:
            if w.node is node and w.kind == "acquire" and isinstance(w.node.done.get(w.n), list):
                out.extend(m for m in w.node.done[w.n] if m[0] not in settled)
        return out

    def check(self) -> None:
        where, reference = self.check_converged()
        stored = [r for k, v in reference.items() if isinstance(k, int) and (r := MessageRecord.from_wire(v)) is not None]
        records = {rec.data: rec for rec in stored}
        assert len(records) == len(stored), f"a publish applied twice: {sorted(r.data for r in stored)}: {where}"
        handed: dict[str, str] = {}
        for w in self.writes:
            answer = w.node.done.get(w.n)
            if w.kind == "acquire" and isinstance(answer, list):
                for _msg_id, item, _count in answer:
                    assert item not in handed, \
                        f"{item} acquired by {handed[item]} and {w.node.replica.id} (lease {LEASE}): {where}"
                    handed[item] = w.node.replica.id
        for w in self.writes:
            if w.n not in w.node.done:
                continue
            if w.kind == "publish":
                assert w.key in records or w.key in handed, f"acknowledged publish of {w.key} lost: {where}"
            elif w.kind == "accept":
                for (msg_id, item, _count), answer in zip(w.value, w.node.done[w.n], strict=True):
                    rec = records.get(item)
                    if answer is None:
                        assert rec is None or rec.state is MessageState.DONE, \
                            f"accepted {item} ({msg_id}) is {rec}: {where}"


def queue_fuzz(seed: int) -> QueueFuzz:
    rng = random.Random(seed * 104729 + 5)
    names = ["a", "b", "c", "d"][: rng.choice([3, 4])]
    durability = rng.choice(["one", "all"])
    net = MoreNet(names, seed=seed, latency=(0.001, rng.choice([0.01, 0.03])), durability=durability,
                  batch=rng.choice([0.0, 0.005]))
    case = QueueFuzz(seed, rng, net, names, increments=False)
    return case.play(f"queue: {len(names)} nodes, durability {durability}", SAFE_KINDS + CRASH_KINDS, most=5)


@pytest.mark.parametrize("seed", SEEDS)
def test_queue_commands_under_faults_hand_out_once_and_lose_nothing_acknowledged(seed: int) -> None:
    """docs/queues.md § 4 under migrations, kills, pauses and partial deliveries (module docstring)."""
    case = queue_fuzz(seed)
    try:
        case.check()
    finally:
        case.net.close()
