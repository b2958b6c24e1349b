"""Stores over a real mosquitto: nodes in separate OS processes (tests/store_node.py), killed for real.

Tier 3: every node is its own process talking JSON lines on stdin/stdout; the master is killed
with SIGKILL where the test says so. Channel timers are short (heartbeat 0.2 s, a peer silent for
1 s is dead) so staleness and rediscovery happen quickly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_mqtt import EmbeddedBroker

pytestmark = pytest.mark.mosquitto

SCRIPT = Path(__file__).parent.parent / "store_node.py"


class StoreNode:
    """One store node process; ``call(op, *args, **kwargs)`` runs a store operation in it."""

    def __init__(self, url: str, namespace: str, role: str, *options: str) -> None:
        self.role = role
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), url, namespace, str(uuid.uuid4()), role, *options],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(SCRIPT.parent.parent)},
        )
        self.node_id: str | None = None

    def ready(self) -> StoreNode:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            self.kill()
            raise RuntimeError(f"store node did not start: {line!r}")
        self.node_id = line[1]
        return self

    def send(self, op: str, *args: Any, **kwargs: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "args": list(args), "kwargs": kwargs}) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"store node {self.role} died (rc={self.proc.poll()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        self.send(op, *args, **kwargs)
        answer = self.answer()
        if "error" in answer:
            raise RuntimeError(f"{answer['error']}: {answer['message']}")
        return answer["ok"]

    def try_call(self, op: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.send(op, *args, **kwargs)
        return self.answer()

    def kill(self) -> None:
        """SIGKILL: no goodbye, nothing flushed."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close()

    def stop(self) -> None:
        """A clean leave (EOF on stdin)."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close()

    def _close(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture
def nodes(broker: EmbeddedBroker, namespace: str) -> Iterator[Any]:
    started: list[StoreNode] = []

    def start(*specs: tuple[str, ...]) -> list[StoreNode]:
        batch = [StoreNode(broker.url, namespace, *spec) for spec in specs]
        started.extend(batch)
        return [n.ready() for n in batch]  # started in parallel, awaited in order

    yield start
    for node in started:
        node.kill()


def wait_for(predicate: Any, timeout: float = 15.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(interval)


def settle(clones: list[StoreNode], master: StoreNode) -> None:
    """The seed's recipe: every writer's await_idle, then the master's."""
    for c in clones:
        assert c.call("await_idle", timeout=20) is True
    assert master.call("await_idle", timeout=20) is True


def test_writes_from_every_node_converge(nodes: Any) -> None:
    master, *clones = nodes(("master",), ("clone",), ("clone",), ("clone",))
    for c in clones:
        assert c.call("await_synced", timeout=10) is True
    writers = [master, *clones]
    for i, node in enumerate(writers):  # queue everything first, so the writes interleave
        for j in range(25):
            node.send("put", f"n{i}-{j}", [i, j])
        node.send("increment", "counter", 1)
        node.send("push", f"log{i}", "x")
        node.send("insert_into", "members", i)
    for node in writers:
        for _ in range(28):
            assert "ok" in node.answer()
    settle(clones, master)
    expected = master.call("dump")
    assert len(expected) == 4 * 25 + 1 + 4 + 1
    assert ["counter", 4] in expected and ["members", [0, 1, 2, 3]] in expected
    for c in clones:
        assert c.call("dump") == expected


def test_await_idle_of_writer_and_master_makes_every_clone_current(nodes: Any) -> None:
    master, c0, c1, c2 = nodes(("master",), ("clone",), ("clone",), ("clone",))
    for c in (c0, c1, c2):
        assert c.call("await_synced", timeout=10) is True
    for round_ in range(5):
        c0.call("put", "foo", round_)
        assert c0.call("await_idle", timeout=10) is True  # the master ACKed the put ...
        assert master.call("await_idle", timeout=10) is True  # ... and every clone ACKed its effect
        # so the other clones answer from their local copy with the new value, without waiting
        assert c1.call("get", "foo") == round_ and c2.call("get", "foo") == round_


def test_put_unique_and_errors_reach_the_callers(nodes: Any) -> None:
    master, c0, c1 = nodes(("master",), ("clone",), ("clone",))
    for c in (c0, c1):
        assert c.call("await_synced", timeout=10) is True
    assert c0.call("put_unique", "leader", "c0") is True
    assert c1.call("put_unique", "leader", "c1") is False
    assert master.call("put_unique", "leader", "m") is False
    assert c1.try_call("get", "nope")["error"] == "NoSuchKey"
    c0.call("put", "text", "abc")
    settle([c0, c1], master)  # c1 has no write in flight, so it judges on its (current) copy
    assert c1.try_call("increment", "text", 1)["error"] == "TypeClash"
    assert master.try_call("increment", "text", 1)["error"] == "TypeClash"
    assert master.try_call("pop", "absent")["error"] == "NoSuchKey"


def test_loss_and_reordering_still_converge_in_order(nodes: Any) -> None:
    faulty = ("--loss", "0.2", "--reorder", "0.2", "--timeout-beats", "10")
    master, c0, c1 = nodes(("master", *faulty, "--seed", "1"), ("clone", *faulty, "--seed", "2"),
                           ("clone", *faulty, "--seed", "3"))
    for c in (c0, c1):
        assert c.call("await_synced", timeout=20) is True
    for i in range(60):
        c0.send("push", "order", i)
        c1.send("put", f"k{i}", i)
        master.send("increment", "n", 1)
    for node in (c0, c1, master):
        for _ in range(60):
            assert "ok" in node.answer()
    settle([c0, c1], master)
    expected = master.call("dump")
    assert ["order", list(range(60))] in expected and ["n", 60] in expected
    assert c0.call("dump") == expected and c1.call("dump") == expected
    for node in (master, c0, c1):  # the faults really happened
        faults = node.call("info")["faults"]
        assert faults["dropped"] > 10 and faults["delayed"] > 10


def test_late_clone_gets_a_snapshot(nodes: Any) -> None:
    [master] = nodes(("master",))
    for i in range(200):
        master.send("put", i, {"v": i})
    for _ in range(200):
        assert "ok" in master.answer()
    [late] = nodes(("clone",))
    assert late.call("await_synced", timeout=10) is True
    assert late.call("dump") == master.call("dump")
    master.call("put", "after", 1)
    assert master.call("await_idle", timeout=10) is True
    assert late.call("get", "after") == 1


def test_expiry_is_enforced_by_the_master_and_reaches_clones(nodes: Any) -> None:
    master, clone = nodes(("master",), ("clone",))
    assert clone.call("await_synced", timeout=10) is True
    clone.call("put", "short", 1, expiry=0.3)
    clone.call("put", "long", 1, expiry=60)
    clone.call("put", "reset", 1, expiry=0.3)
    clone.call("increment", "reset", 1)  # a write without expiry makes the key permanent
    settle([clone], master)
    assert clone.call("get", "short") == 1
    wait_for(lambda: clone.try_call("get", "short").get("error") == "NoSuchKey", timeout=5)
    assert master.try_call("get", "short")["error"] == "NoSuchKey"
    assert clone.call("get", "long") == 1 and clone.call("get", "reset") == 2


def test_master_restart_from_sqlite_is_found_again(nodes: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    master, clone = nodes(("master", "--sqlite", db), ("clone",))
    assert clone.call("await_synced", timeout=10) is True
    clone.call("put", "a", 1, expiry=120)
    master.call("put", "b", [1, 2])
    settle([clone], master)
    old_master = clone.call("info")["master"]
    master.stop()
    wait_for(lambda: clone.call("info")["stale"], timeout=5)  # a stale clone says so ...
    assert clone.try_call("get", "a")["error"] == "Stale"
    assert clone.call("get", "a", allow_stale=True) == 1  # ... and still serves stale reads on request
    clone.call("put", "c", 3)  # buffered while the master is away
    [master2] = nodes(("master", "--sqlite", db))
    assert clone.call("await_synced", timeout=10) is True
    settle([clone], master2)
    assert clone.call("info")["master"] != old_master
    assert master2.call("dump") == [["a", 1], ["b", [1, 2]], ["c", 3]]
    assert clone.call("dump") == master2.call("dump")


def test_kill_9_of_the_sqlite_master_loses_no_acknowledged_write(nodes: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    master, c0, c1 = nodes(("master", "--sqlite", db), ("clone",), ("clone",))
    for c in (c0, c1):
        assert c.call("await_synced", timeout=10) is True
    for i in range(100):
        c0.send("put", f"c0-{i}", i)
        c1.send("increment", "counter", 1)
    for c in (c0, c1):
        for _ in range(100):
            assert "ok" in c.answer()
    for c in (c0, c1):
        assert c.call("await_idle", timeout=20) is True  # every write above is acknowledged
    master.call("put", "direct", True)  # returned: applied and synced to disk
    master.kill()
    c0.call("put", "during-outage", 1)
    [master2] = nodes(("master", "--sqlite", db))
    for c in (c0, c1):
        assert c.call("await_synced", timeout=10) is True
    settle([c0, c1], master2)
    dump = dict((k, v) for k, v in master2.call("dump"))
    assert all(dump[f"c0-{i}"] == i for i in range(100))
    assert dump["counter"] == 100 and dump["direct"] is True and dump["during-outage"] == 1
    assert c1.call("dump") == master2.call("dump")
