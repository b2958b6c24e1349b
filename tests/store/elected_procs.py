"""Elected-store nodes as separate OS processes (tests/elected_node.py), killable for real.

Shared by tests/store/test_elected_live.py and bench/failover.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent


class ElectedProc:
    """One node: its process, and what it printed (acks, masters seen, dumps)."""

    def __init__(self, url: str, namespace: str, store: str, mode: str, cycle: float, gap: float, *,
                 writers: int = 0, sqlite: str | None = None, durability: str = "one") -> None:
        cmd = [sys.executable, str(HERE / "elected_node.py"), url, namespace, store, mode, str(cycle), str(gap),
               "--writers", str(writers), "--durability", durability]
        if sqlite:
            cmd += ["--sqlite", sqlite]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(HERE.parent)})
        self.node_id: str | None = None
        self.acks: list[int] = []
        self.masters: list[tuple[int, str, float]] = []
        self.conflicts: list[Any] = []
        self.dumps: list[dict[str, Any]] = []
        self.quiets = 0
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.endswith("\n"):
                break  # cut by a kill
            kind, _, rest = line.rstrip("\n").partition(" ")
            with self._lock:
                if kind == "READY":
                    self.node_id = rest
                    self._ready.set()
                elif kind == "ACK":
                    self.acks.append(int(rest.split(" ")[0]))
                elif kind == "MASTER":
                    term, node, t = rest.split(" ")
                    self.masters.append((int(term), node, float(t)))
                elif kind == "CONFLICT":
                    self.conflicts.append(json.loads(rest))
                elif kind == "QUIET":
                    self.quiets += 1
                elif kind == "DUMP":
                    self.dumps.append(json.loads(rest))

    def wait_ready(self, timeout: float = 30.0) -> str:
        if not self._ready.wait(timeout):
            raise TimeoutError("node did not start")
        assert self.node_id is not None
        return self.node_id

    def quiet(self) -> None:
        """Stop writing (answers to the writes in flight still arrive)."""
        self.proc.send_signal(signal.SIGUSR1)

    def wait_quiet(self, timeout: float = 60.0) -> None:
        if not wait_for(lambda: self.quiets > 0, timeout):
            raise TimeoutError("node did not go quiet")

    def dump(self, timeout: float = 60.0) -> dict[str, Any]:
        n = len(self.dumps)
        self.proc.send_signal(signal.SIGUSR2)
        if not wait_for(lambda: len(self.dumps) > n, timeout):
            raise TimeoutError("no dump")
        with self._lock:
            return self.dumps[-1]

    def current_master(self) -> tuple[int, str, float] | None:
        with self._lock:
            return self.masters[-1] if self.masters else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._thread.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def cont(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def terminate(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_for(predicate: Any, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def check_converged(nodes: list[ElectedProc], all_nodes: list[ElectedProc]) -> dict[str, Any]:
    """Dump ``nodes``; assert identical contents, every acknowledged push of ``all_nodes`` present,
    none applied twice. Returns the common contents."""
    for n in nodes:
        n.quiet()
    for n in nodes:
        n.wait_quiet()
    time.sleep(0.5)  # the last records reach every replica
    dumps = [n.dump() for n in nodes]
    reference = dumps[0]["contents"]
    for d in dumps[1:]:
        assert d["contents"] == reference
    for node in all_nodes:
        got = reference.get(json.dumps(f"log-{node.node_id}"), [])
        assert len(got) == len(set(got)), f"a write of {node.node_id} applied twice"
        assert got == sorted(got), f"writes of {node.node_id} out of order"
        missing = set(node.acks) - set(got)
        assert not missing, f"{len(missing)} acknowledged writes of {node.node_id} lost: {sorted(missing)[:10]}"
    assert sum(1 for d in dumps if d["is_master"]) <= 1
    return reference
