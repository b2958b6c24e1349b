"""Work-queue nodes as separate OS processes (tests/queue_node.py), killable for real.

Shared by tests/queue/test_queue_live.py and bench/queue.py.
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


class QueueProc:
    """One node: its process and what it printed."""

    def __init__(self, url: str, namespace: str, queue: str, *args: str) -> None:
        cmd = [sys.executable, str(HERE / "queue_node.py"), url, namespace, queue, *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(HERE.parent)})
        self.node_id: str | None = None
        self.published: dict[tuple[str, int], int] = {}  # (tag, i) -> id
        self.delivered: list[tuple[int, int, Any, float]] = []  # (id, count, data, time)
        self.settled: dict[str, list[tuple[int, Any]]] = {"ACCEPTED": [], "RELEASED": [], "REJECTED": []}
        self.not_held: list[int] = []
        self.masters: list[tuple[int, str, float]] = []
        self.dumps: list[dict[str, Any]] = []
        self.progress: list[tuple[int, int, float]] = []
        self.publish_done: float | None = None
        self.left = False
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
            parts = rest.split(" ", 3 if kind == "DELIVERED" else 2)
            with self._lock:
                if kind == "READY":
                    self.node_id = rest
                    self._ready.set()
                elif kind == "PUBLISHED":
                    self.published[(parts[0], int(parts[1]))] = int(parts[2])
                elif kind == "DELIVERED":
                    self.delivered.append((int(parts[0]), int(parts[1]), _data(parts[3]), float(parts[2])))
                elif kind in self.settled:
                    msg_id, _, data = rest.partition(" ")
                    self.settled[kind].append((int(msg_id), _data(data)))
                elif kind == "NOTHELD":
                    self.not_held.append(int(rest))
                elif kind == "MASTER":
                    self.masters.append((int(parts[0]), parts[1], float(parts[2])))
                elif kind == "DUMP":
                    self.dumps.append(json.loads(rest))
                elif kind == "PROGRESS":
                    self.progress.append((int(parts[0]), int(parts[1]), float(parts[2])))
                elif kind == "PUBLISH_DONE":
                    self.publish_done = float(rest)
                elif kind == "LEFT":
                    self.left = True

    def wait_ready(self, timeout: float = 30.0) -> str:
        if not self._ready.wait(timeout):
            raise TimeoutError("node did not start")
        assert self.node_id is not None
        return self.node_id

    def accepted(self) -> list[Any]:
        with self._lock:
            return [d for _, d in self.settled["ACCEPTED"]]

    def dump(self, timeout: float = 30.0) -> dict[str, Any]:
        n = len(self.dumps)
        self.proc.send_signal(signal.SIGUSR2)
        if not wait_for(lambda: len(self.dumps) > n, timeout):
            raise TimeoutError("no dump")
        with self._lock:
            return self.dumps[-1]

    def current_master(self) -> str | None:
        with self._lock:
            return max(self.masters)[1] if self.masters else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._thread.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def terminate(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _data(text: str) -> Any:
    data = json.loads(text)
    return tuple(data) if isinstance(data, list) else data


def wait_for(predicate: Any, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False
