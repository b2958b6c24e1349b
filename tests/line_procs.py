"""Node processes that print one event per line (``KIND rest``), read by a thread, killable for real.

The node side writes its lines with :func:`out`; the test side reads them with :class:`LineProc`,
the base of tests/store/elected_procs.py, tests/queue/queue_procs.py and bench/failover.py's nodes.
A subclass sets its own fields first, then calls :meth:`LineProc.__init__` (which starts the reader),
and handles every kind of line but ``READY <node id>`` and ``DUMP <json>`` (the answer to SIGUSR2)
in ``_line(kind, rest)``, which runs under ``_lock``.
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

from broker_mqtt import tune_garbage_collector

ROOT = Path(__file__).resolve().parent.parent

#: set (to 1) in a node process's environment: it keeps Python's collector settings (bench --python-gc)
PYTHON_GC = "BROKER_MQTT_BENCH_PYTHON_GC"


def tune_node_collector() -> None:
    """Node side, at start-up: ``tune_garbage_collector()`` as ``broker-mqtt node`` does, unless
    :data:`PYTHON_GC` is set."""
    if not os.environ.get(PYTHON_GC):
        tune_garbage_collector()


def out(*parts: object) -> None:
    """Node side: print one line in one write, flushed (a line cut by SIGKILL would otherwise be
    read as a shorter fact)."""
    sys.stdout.write(" ".join(map(str, parts)) + "\n")
    sys.stdout.flush()


class LineProc:
    """One node process and what it printed."""

    dump_timeout = 60.0  #: default seconds :meth:`dump` waits for the answer

    def __init__(self, cmd: list[str], *, stderr: Any = None, cwd: Path | None = None) -> None:
        self.node_id: str | None = None
        self.dumps: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=cwd,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.endswith("\n"):
                break  # cut by a kill
            self._take(line)

    def _take(self, line: str) -> None:
        kind, _, rest = line.rstrip("\n").partition(" ")
        with self._lock:
            if kind == "READY":
                self.node_id = rest
                self._ready.set()
            elif kind == "DUMP":
                self.dumps.append(json.loads(rest))
            else:
                self._line(kind, rest)

    def _line(self, kind: str, rest: str) -> None:
        raise NotImplementedError

    def wait_ready(self, timeout: float = 30.0) -> str:
        if not self._ready.wait(timeout):
            raise TimeoutError("node did not start")
        assert self.node_id is not None
        return self.node_id

    def dump(self, timeout: float | None = None) -> dict[str, Any]:
        """Ask for a dump (SIGUSR2) and return it."""
        n = len(self.dumps)
        self.proc.send_signal(signal.SIGUSR2)
        if not wait_for(lambda: len(self.dumps) > n, self.dump_timeout if timeout is None else timeout):
            raise TimeoutError("no dump")
        with self._lock:
            return self.dumps[-1]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._thread.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def stop(self) -> None:
        """SIGSTOP: the process freezes; its sockets stay open (a hung node, not a dead one)."""
        self.proc.send_signal(signal.SIGSTOP)

    def cont(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def terminate(self, timeout: float = 10.0) -> None:
        """SIGTERM (after a SIGCONT, should it be stopped); SIGKILL after ``timeout``."""
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
