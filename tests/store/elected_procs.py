"""Elected-store nodes as separate OS processes (tests/elected_node.py), killable for real.

Shared by tests/store/test_elected_live.py and bench/failover.py.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from line_procs import LineProc, wait_for  # noqa: E402 - tests/ is this module's parent

__all__ = ["ElectedProc", "check_converged", "elected_replicas", "wait_for"]


class ElectedProc(LineProc):
    """One node: its process, and what it printed (acks, masters seen, conflicts, dumps)."""

    def __init__(self, url: str, namespace: str, store: str, mode: str, cycle: float, gap: float, *,
                 writers: int = 0, sqlite: str | None = None, durability: str = "one", n_hosts: int | None = None,
                 chunk: int = 0, resident: str = "memory", stderr: Any = None) -> None:
        cmd = [sys.executable, str(HERE / "elected_node.py"), url, namespace, store, mode, str(cycle), str(gap),
               "--writers", str(writers), "--durability", durability, "--chunk", str(chunk)]
        if n_hosts is not None:
            cmd += ["--n-hosts", str(n_hosts)]
        if sqlite:
            cmd += ["--sqlite", sqlite, "--resident", resident]
        self.acks: list[int] = []
        self.masters: list[tuple[int, str, float]] = []
        self.conflicts: list[Any] = []
        self.quiets = 0
        super().__init__(cmd, stderr=stderr)

    def _line(self, kind: str, rest: str) -> None:
        if kind == "ACK":
            self.acks.append(int(rest.split(" ")[0]))
        elif kind == "MASTER":
            term, node, t = rest.split(" ")
            self.masters.append((int(term), node, float(t)))
        elif kind == "CONFLICT":
            self.conflicts.append(json.loads(rest))
        elif kind == "QUIET":
            self.quiets += 1

    def quiet(self) -> None:
        """Stop writing (answers to the writes in flight still arrive)."""
        self.proc.send_signal(signal.SIGUSR1)

    def wait_quiet(self, timeout: float = 60.0) -> None:
        if not wait_for(lambda: self.quiets > 0, timeout):
            raise TimeoutError("node did not go quiet")

    def current_master(self) -> tuple[int, str, float] | None:
        with self._lock:
            return self.masters[-1] if self.masters else None


def _divergence(nodes: list[ElectedProc], dumps: list[dict[str, Any]], i: int) -> str:
    """What differs between the first node's dump and node ``i``'s, and how each node stands."""
    a, b = dumps[0]["contents"], dumps[i]["contents"]
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    def size(v: Any) -> Any:
        return f"{len(v)} items" if isinstance(v, list) else v

    diff = [(k, size(a.get(k)), size(b.get(k))) for k in keys[:5]]
    state = [(n.node_id, d["epoch"], d["is_master"], d["master"], d.get("stats")) for n, d in zip(nodes, dumps, strict=True)]
    return f"node {i} differs from node 0 in {len(keys)} keys, e.g. (key, at 0, at {i}) {diff}; nodes: {state}"


def check_converged(nodes: list[ElectedProc], all_nodes: list[ElectedProc]) -> dict[str, Any]:
    """Dump ``nodes``; assert identical contents, every acknowledged push of ``all_nodes`` present,
    none applied twice. Returns the common contents."""
    for n in nodes:
        n.quiet()
    for n in nodes:
        n.wait_quiet()
    # the last records reach every replica a little after the writers went quiet (later on a busy machine)
    deadline = time.monotonic() + 60
    while True:
        dumps = [n.dump() for n in nodes]
        if all(d["contents"] == dumps[0]["contents"] for d in dumps[1:]) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    reference = dumps[0]["contents"]
    for i, d in enumerate(dumps[1:], 1):
        assert d["contents"] == reference, _divergence(nodes, dumps, i)
    for node in all_nodes:
        got = pushed(reference, node.node_id)
        assert len(got) == len(set(got)), f"a write of {node.node_id} applied twice"
        assert got == sorted(got), f"writes of {node.node_id} out of order"
        missing = set(node.acks) - set(got)
        assert not missing, f"{len(missing)} acknowledged writes of {node.node_id} lost: {sorted(missing)[:10]}"
    for _ in range(5):
        if sum(1 for d in dumps if d["is_master"]) <= 1:
            break
        # the dumps are taken one after the other: in rotate mode (a new master every slot) a
        # handover between two of them shows the old and the new master; a stuck one stays
        time.sleep(0.1)
        dumps = [n.dump() for n in nodes]
    assert sum(1 for d in dumps if d["is_master"]) <= 1, [(d["epoch"], d["is_master"]) for d in dumps]
    return reference


def pushed(contents: dict[str, Any], node_id: str) -> list[Any]:
    """What ``node_id``'s writer pushed, in order: list ``log-<id>``, then ``log-<id>/<k>`` by k (``--chunk``)."""
    base = f"log-{node_id}"
    chunks = sorted((int(json.loads(k)[len(base) + 1:]), v) for k, v in contents.items()
                    if json.loads(k).startswith(base + "/"))
    return [*contents.get(json.dumps(base), []), *(x for _, v in chunks for x in v)]


@contextlib.contextmanager
def elected_replicas(url: str, namespace: str, store: str, n: int = 2) -> Iterator[list[ElectedProc]]:
    """``n`` replicas of elected store ``store`` (sticky, cycle 1 s, gap 0.25 s), each in its own
    process; yields once one of them is master, kills them all on leaving."""
    nodes = [ElectedProc(url, namespace, store, "sticky", 1.0, 0.25) for _ in range(n)]
    try:
        for node in nodes:
            node.wait_ready()
        assert wait_for(lambda: any(node.current_master() for node in nodes), 30)
        yield nodes
    finally:
        for node in nodes:
            node.kill()
