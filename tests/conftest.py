"""Shared fixtures.

``broker``: one real embedded mosquitto for the whole test session (tests that restart or kill a
broker start their own). ``anyio_backend`` defaults to asyncio (aiomqtt needs it); the simulated
time tests under tests/actor/ override it with trio's MockClock.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_mqtt import EmbeddedBroker

HERE = Path(__file__).parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def namespace() -> str:
    """A fresh topic namespace per test, so tests on the shared broker never see each other."""
    return "t" + uuid.uuid4().hex[:10]


class NodeProcess:
    """A broker_mqtt endpoint in its own OS process (tests/node_process.py), killable for real."""

    def __init__(self, broker_url: str, namespace: str, *args: str) -> None:
        self.id = uuid.uuid4()
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "node_process.py"), broker_url, namespace, str(self.id), *args],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(HERE.parent)},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "READY":
            self.kill()
            raise RuntimeError(f"node process did not start: {line!r}")

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to say goodbye."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close()

    def terminate(self) -> None:
        """SIGTERM: a clean leave."""
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)
        self._close()

    def _close(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def node_process() -> Iterator[type[NodeProcess]]:
    started: list[NodeProcess] = []

    class Tracked(NodeProcess):
        def __init__(self, *a: str) -> None:
            super().__init__(*a)
            started.append(self)

    yield Tracked
    for node in started:
        node.kill()
