"""Simulated time for protocol tests: endpoints on one in-memory broker, trio's MockClock.

Every test here runs on anyio's trio backend with ``trio.testing.MockClock(autojump_threshold=0)``:
whenever every task waits, the clock jumps to the next deadline, so minutes of election cycles,
leases and timeouts pass in milliseconds of wall time, and a run depends on no real timing. The
broker is a :class:`~broker_mqtt.transport.memory.MemoryConnector`'s
:class:`~broker_mqtt.transport.memory_broker.MemoryBroker`: no network, no process. The ``sim``
fixture makes endpoints on it (each with its own connector, so a test can cut one) and tells the
simulated time; ``random`` is seeded per test, so a failure replays.
"""

from __future__ import annotations

import gc
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import trio.testing

from broker_mqtt import Endpoint
from broker_mqtt.transport.base import ConnectionClosed, ConnectOptions
from broker_mqtt.transport.memory import MemoryConnection, MemoryConnector
from broker_mqtt.transport.memory_broker import MemoryBroker


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


@pytest.fixture(autouse=True)
def _seeded(request: pytest.FixtureRequest) -> Iterator[None]:
    """The same random choices every run of a test (election jitter, ids drawn from ``random``)."""
    state = random.getstate()
    random.seed(request.node.nodeid)
    yield
    random.setstate(state)


class Link(MemoryConnector):
    """One endpoint's connector, which a test can take down (a killed or partitioned node: its
    connection is cut, the broker publishes its will, reconnects are refused) and bring back."""

    down = False

    @asynccontextmanager
    async def connect(self, options: ConnectOptions, on_confirmed: Any, on_rejected: Any,
                      ) -> AsyncIterator[MemoryConnection]:
        if self.down:
            await anyio.lowlevel.checkpoint()
            raise ConnectionClosed(f"{self}: the node is cut off")
        async with super().connect(options, on_confirmed, on_rejected) as connection:
            yield connection


class Sim:
    """One in-memory broker and the endpoints a test opens on it."""

    def __init__(self, stack: AsyncExitStack) -> None:
        self.broker = MemoryBroker()
        self._stack = stack
        self._count = 0
        self.links: dict[uuid.UUID, Link] = {}

    @staticmethod
    def now() -> float:
        """Simulated seconds since the test began (trio's MockClock starts at 0)."""
        return anyio.current_time()

    def endpoint(self, **options: Any) -> Endpoint:
        """An endpoint on this broker with its own :class:`Link` (not open yet: ``async with`` it)."""
        self._count += 1
        connector = Link(self.broker, name=f"sim{self._count}")
        options.setdefault("id", uuid.UUID(int=random.getrandbits(128)))
        options.setdefault("namespace", "sim")
        ep = Endpoint(connector=connector, **options)
        self.links[ep.id] = connector
        return ep

    async def open(self, **options: Any) -> Endpoint:
        """An open endpoint, closed when the test ends."""
        return await self._stack.enter_async_context(self.endpoint(**options))

    def cut(self, ep: Endpoint) -> int:
        """Cut ``ep``'s network connection (the broker publishes its will; it reconnects)."""
        return self.links[ep.id].cut()

    def take_down(self, ep: Endpoint) -> None:
        """``ep`` vanishes as a killed process would: cut, its will published, no reconnect."""
        link = self.links[ep.id]
        link.down = True
        link.cut()

    def bring_back(self, ep: Endpoint) -> None:
        """``ep`` may reconnect again (its next attempt, after its reconnect delay, succeeds)."""
        self.links[ep.id].down = False


@pytest.fixture
async def sim(request: pytest.FixtureRequest) -> AsyncIterator[Sim]:
    async with AsyncExitStack() as stack:
        yield Sim(stack)
    gc.collect()  # anything a test left unclosed warns here, in that test (pytest makes it an error)
    request.node.user_properties.append(("simulated seconds", anyio.current_time()))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """With ``-v``: the simulated time each test covered (next to --durations' wall times)."""
    if terminalreporter.config.get_verbosity() < 1:
        return
    rows = {r.nodeid: v for reports in terminalreporter.stats.values() for r in reports
            if getattr(r, "when", None) == "teardown"
            for k, v in getattr(r, "user_properties", ()) if k == "simulated seconds"}.items()
    if rows:
        terminalreporter.section("simulated time")
        for nodeid, seconds in rows:
            terminalreporter.write_line(f"{seconds:8.1f} s  {nodeid}")


@asynccontextmanager
async def sim_time(limit: float) -> AsyncIterator[None]:
    """Fail if the block takes more than ``limit`` simulated seconds."""
    with anyio.fail_after(limit):
        yield
