"""Elected stores across a network split: two real mosquittos joined by a real mosquitto bridge.

Broker B bridges to broker A (``topic # both 1``) through a TCP proxy the test cuts and restores
(tests/store/bridge_proxy.py); two node processes (tests/split_node.py) sit on each broker. Cut
the bridge: each side elects its own master and keeps accepting writes; write on both sides (the
same keys, different keys, erases); restore it: one master again, identical contents on every
node, last writer wins per key, and a ConflictResolved event on every node for each key both sides wrote
with different outcomes (and none for the others).

The bridge speaks MQTT 3.1.1 (with mosquitto 2.0.11 the remote broker drops an MQTT 5 bridge's
CONNECT as a protocol error); nothing we send across needs MQTT 5 properties; ``try_private true`` keeps messages from looping back. Two bridge sessions: ``clean``
(what is published while the bridge is down never crosses it, as in a partition) and
``persistent`` (mosquitto's default: the QoS 1 traffic of the cut, heartbeats and writes included,
arrives late, once the bridge is back).

No timing assertions: every wait is a generous liveness bound.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bridge_proxy import CuttableProxy
from elected_procs import wait_for

from broker_mqtt.transport.embedded import EmbeddedBroker

pytestmark = [pytest.mark.mosquitto, pytest.mark.slow]

TESTS = Path(__file__).resolve().parent.parent
CYCLE, GAP = 1.0, 0.25
STORE = "cfg"
LIVENESS = 60.0  # seconds: a bound that only a hang exceeds


class SplitNode:
    """One tests/split_node.py process: commands on stdin, what it printed collected by a thread."""

    _ids = itertools.count(1)

    def __init__(self, label: str, url: str, namespace: str, stderr: Path) -> None:
        self.label = label
        self.stderr_path = stderr
        self._stderr = open(stderr, "w")  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(
            [sys.executable, str(TESTS / "split_node.py"), url, namespace, STORE, str(CYCLE), str(GAP)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
        self.node_id: str | None = None
        self.masters: list[tuple[int, str]] = []
        self.conflicts: list[dict[str, Any]] = []
        self.answers: dict[int, str | None] = {}  # command id -> None (ACK) or the error
        self.dumps: dict[int, dict[str, Any]] = {}
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            kind, _, rest = line.partition(" ")
            with self._lock:
                self.lines.append(line)
                if kind == "READY":
                    self.node_id = rest
                elif kind == "MASTER":
                    term, node = rest.split(" ")
                    self.masters.append((int(term), node))
                elif kind == "CONFLICT":
                    self.conflicts.append(json.loads(rest))
                elif kind == "ACK":
                    self.answers[int(rest)] = None
                elif kind == "ERR":
                    ident, _, error = rest.partition(" ")
                    self.answers[int(ident)] = error
                elif kind == "DUMP":
                    ident, _, body = rest.partition(" ")
                    self.dumps[int(ident)] = json.loads(body)

    def send(self, op: str, **fields: Any) -> int:
        ident = next(self._ids)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": ident, "op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        return ident

    def put(self, key: str, value: Any) -> int:
        return self.send("put", key=key, value=value)

    def erase(self, key: str) -> int:
        return self.send("erase", key=key)

    def wait_answer(self, ident: int, timeout: float = LIVENESS) -> None:
        assert wait_for(lambda: ident in self.answers, timeout), f"{self.label}: write {ident} not answered"
        error = self.answers[ident]
        assert error is None, f"{self.label}: write {ident} failed: {error}"

    def dump(self, timeout: float = LIVENESS) -> dict[str, Any]:
        ident = self.send("dump")
        assert wait_for(lambda: ident in self.dumps, timeout), f"{self.label}: no dump"
        return self.dumps[ident]

    def wait_ready(self, timeout: float = 30.0) -> str:
        assert wait_for(lambda: self.node_id is not None, timeout), f"{self.label} did not start"
        assert self.node_id is not None
        return self.node_id

    def latest_master(self) -> tuple[int, str] | None:
        with self._lock:
            return self.masters[-1] if self.masters else None

    def conflict_keys(self) -> set[str]:
        with self._lock:
            return {c["key"] for c in self.conflicts}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._thread.join(5)
        for f in (self.proc.stdin, self.proc.stdout, self._stderr):
            if f is not None:
                f.close()

    def report(self) -> str:
        tail = self.stderr_path.read_text(errors="replace")[-6000:] if self.stderr_path.exists() else ""
        with self._lock:
            return (f"--- {self.label} {self.node_id} (exit {self.proc.poll()})\n"
                    f"masters: {self.masters}\nconflicts: {self.conflicts}\n"
                    f"last dumps: {list(self.dumps.values())[-3:]}\nstderr tail:\n{tail}")


@pytest.fixture(params=["clean", "persistent"])
def split_net(request: pytest.FixtureRequest) -> Iterator[tuple[EmbeddedBroker, EmbeddedBroker, CuttableProxy]]:
    """Broker A; broker B bridged to A through a cuttable proxy. Yields once the bridge is up.

    ``clean``: what is published during the cut is lost, as in a partition. ``persistent``
    (mosquitto's default, ``cleansession false``): both brokers queue the QoS 1 traffic of the cut
    and deliver it, stale, when the bridge reconnects.
    """
    a = EmbeddedBroker()
    a.start()
    proxy = CuttableProxy(a.port)
    b = EmbeddedBroker(extra_config="\n".join([
        "connection split-bridge",
        f"address 127.0.0.1:{proxy.port}",
        "topic # both 1",
        "bridge_protocol_version mqttv311",
        "try_private true",
        f"cleansession {'true' if request.param == 'clean' else 'false'}",
        "restart_timeout 1",
        "keepalive_interval 5",
        "notifications false",
    ]))
    try:
        b.start()
        assert wait_for(lambda: proxy.active() > 0, 20), f"the bridge did not connect: {b.log_tail()}"
        yield a, b, proxy
    finally:
        b.cleanup()
        proxy.close()
        a.cleanup()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Any]:
    started: list[SplitNode] = []

    def start(label: str, url: str, namespace: str) -> SplitNode:
        n = SplitNode(label, url, namespace, tmp_path / f"{label}.stderr")
        started.append(n)
        return n

    yield start
    for n in started:
        n.kill()


def _one_master(group: list[SplitNode]) -> tuple[int, str] | None:
    """The master every node of ``group`` last reported, if they all agree."""
    latest = {n.latest_master() for n in group}
    return latest.pop() if len(latest) == 1 and None not in latest else None


def _converged(group: list[SplitNode]) -> dict[str, Any] | None:
    """Common contents if every node's dump is idle, identical, and shows the same single master."""
    dumps = [n.dump() for n in group]
    contents = [d["contents"] for d in dumps]
    if any(c != contents[0] for c in contents) or not all(d["idle"] and not d["stale"] for d in dumps):
        return None
    if len({d["master"] for d in dumps}) != 1 or sum(d["is_master"] for d in dumps) != 1:
        return None
    return {json.loads(k): v for k, v in contents[0].items()}


@pytest.mark.timeout(400)
def test_split_heals_into_identical_contents_with_conflicts_reported(
        split_net: tuple[EmbeddedBroker, EmbeddedBroker, CuttableProxy], namespace: str, nodes: Any) -> None:
    broker_a, broker_b, proxy = split_net
    side_a = [nodes(f"a{i}", broker_a.url, namespace) for i in (1, 2)]
    side_b = [nodes(f"b{i}", broker_b.url, namespace) for i in (1, 2)]
    everyone = side_a + side_b
    try:
        _run_split(proxy, side_a, side_b, everyone)
    except BaseException:
        for n in everyone:  # the state at the failure, for the report
            with contextlib.suppress(AssertionError):
                n.dump(timeout=35)
        print("\n\n".join(n.report() for n in everyone))
        print("broker A log:", broker_a.log_tail(), "\nbroker B log:", broker_b.log_tail())
        raise


def _run_split(proxy: CuttableProxy, side_a: list[SplitNode], side_b: list[SplitNode],
               everyone: list[SplitNode]) -> None:
    a1, a2 = side_a
    b1, b2 = side_b
    ids_a = {n.wait_ready() for n in side_a}
    ids_b = {n.wait_ready() for n in side_b}

    # -- joined: one master for all four; common history before the split ----------------------------
    assert wait_for(lambda: _one_master(everyone) is not None, LIVENESS), "no single master before the split"
    before = {"keep": "k0", "shared": "s0", "same": 0, "erased-a": "ea0", "erased-b": "eb0", "put-vs-erase": "p0"}
    acks = [(a1 if i % 2 else b1, (a1 if i % 2 else b1).put(k, v)) for i, (k, v) in enumerate(before.items())]
    for node, ident in acks:
        node.wait_answer(ident)
    assert wait_for(lambda: _converged(everyone) == before, LIVENESS), "no common history before the split"
    term_before = _one_master(everyone)[0]  # type: ignore[index]

    # -- split: each side elects its own master ----------------------------------------------------------
    proxy.cut()

    def own_masters() -> bool:
        ma, mb = _one_master(side_a), _one_master(side_b)
        return ma is not None and mb is not None and ma[1] in ids_a and mb[1] in ids_b

    assert wait_for(own_masters, LIVENESS), "the sides did not each elect a master"
    master_a, master_b = _one_master(side_a), _one_master(side_b)
    assert max(master_a[0], master_b[0]) > term_before  # type: ignore[index]

    # writes on side A first, then on side B (later: B wins the keys both sides wrote)
    writes_a = [a1.put("shared", "from-a"), a2.put("only-a", "a"), a1.erase("erased-a"),
                a2.put("put-vs-erase", "from-a"), a1.put("same", 7)]
    for ident, node in zip(writes_a, [a1, a2, a1, a2, a1], strict=True):
        node.wait_answer(ident)
    writes_b = [b2.put("shared", "from-b"), b1.put("only-b", "b"), b2.erase("erased-b"),
                b1.erase("put-vs-erase"), b2.put("same", 7)]
    for ident, node in zip(writes_b, [b2, b1, b2, b1, b2], strict=True):
        node.wait_answer(ident)

    # the split is real: each side sees its own writes only
    dump_a, dump_b = a2.dump(), b1.dump()
    assert dump_a["contents"]['"shared"'] == "from-a" and '"only-b"' not in dump_a["contents"]
    assert dump_b["contents"]['"shared"'] == "from-b" and '"only-a"' not in dump_b["contents"]

    # -- heal ------------------------------------------------------------------------------------------
    proxy.restore()
    assert wait_for(lambda: _one_master(everyone) is not None, LIVENESS), "no single master after the heal"
    expected = {"keep": "k0", "shared": "from-b", "same": 7, "only-a": "a", "only-b": "b"}
    contents: list[Any] = [None]

    def converged() -> bool:
        contents[0] = _converged(everyone)
        return contents[0] is not None

    assert wait_for(converged, LIVENESS, step=0.5), "the replicas did not converge after the heal"
    assert contents[0] == expected  # last writer wins per key; erases kept; nothing lost

    expected_conflicts = {"shared", "put-vs-erase"}  # not "same": both sides wrote the same value
    assert wait_for(lambda: all(n.conflict_keys() >= expected_conflicts for n in everyone), LIVENESS), \
        "not every node reported the conflicts"
    for n in everyone:  # each key once: a merge is reported once, not again by later epochs
        assert sorted(c["key"] for c in n.conflicts) == sorted(expected_conflicts), f"{n.label}: {n.conflicts}"
        by_key = {c["key"]: c for c in n.conflicts}
        assert by_key["shared"]["chosen"][:2] == ["from-b", False]
        assert by_key["shared"]["other"][:2] == ["from-a", False]
        assert by_key["put-vs-erase"]["chosen"][1] is True  # B's later erase won
        assert by_key["put-vs-erase"]["other"][:2] == ["from-a", False]

    # -- one master again, and it takes writes from both former sides ---------------------------------------
    # The merge's new epoch: every node reports it a little after the conflicts it resolved (one
    # reading right after them may still show the side master it followed before): wait for it.
    def merged_master() -> bool:
        final = _one_master(everyone)
        return final is not None and final[0] > max(master_a[0], master_b[0])  # type: ignore[index]

    assert wait_for(merged_master, LIVENESS), f"no single master in a new epoch after the merge: {_one_master(everyone)}"
    for node, key in ((a2, "after-a"), (b2, "after-b")):
        node.wait_answer(node.put(key, node.label))
    expected |= {"after-a": "a2", "after-b": "b2"}
    assert wait_for(converged, LIVENESS, step=0.5), "the replicas did not converge after new writes"
    assert contents[0] == expected
