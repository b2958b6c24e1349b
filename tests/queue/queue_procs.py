"""Work-queue nodes as separate OS processes (tests/queue_node.py), killable for real.

Shared by tests/queue/test_queue_live.py and bench/work_queue.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from line_procs import LineProc, wait_for  # noqa: E402 - tests/ is this module's parent

__all__ = ["QueueProc", "wait_for"]


class QueueProc(LineProc):
    """One node: its process and what it printed."""

    dump_timeout = 30.0

    def __init__(self, url: str, namespace: str, queue: str, *args: str) -> None:
        cmd = [sys.executable, str(HERE / "queue_node.py"), url, namespace, queue, *args]
        self.published: dict[tuple[str, int], int] = {}  # (tag, i) -> id
        self.delivered: list[tuple[int, int, Any, float]] = []  # (id, count, data, time)
        self.settled: dict[str, list[tuple[int, Any]]] = {"ACCEPTED": [], "RELEASED": [], "REJECTED": []}
        self.not_held: list[int] = []
        self.masters: list[tuple[int, str, float]] = []
        self.progress: list[tuple[int, int, float]] = []
        self.publish_done: float | None = None
        self.publish_start_cpu: float | None = None  # the process's CPU seconds when it began publishing
        self.left = False
        super().__init__(cmd)

    def _line(self, kind: str, rest: str) -> None:
        parts = rest.split(" ", 3 if kind == "DELIVERED" else 2)
        if kind == "PUBLISHED":
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
        elif kind == "PROGRESS":
            self.progress.append((int(parts[0]), int(parts[1]), float(parts[2])))
        elif kind == "PUBLISH_DONE":
            self.publish_done = float(rest)
        elif kind == "PUBLISH_START":
            self.publish_start_cpu = float(rest)
        elif kind == "LEFT":
            self.left = True

    def accepted(self) -> list[Any]:
        with self._lock:
            return [d for _, d in self.settled["ACCEPTED"]]

    def current_master(self) -> str | None:
        with self._lock:
            return max(self.masters)[1] if self.masters else None


def _data(text: str) -> Any:
    data = json.loads(text)
    return tuple(data) if isinstance(data, list) else data
