"""A consumer against a scripted queue: what it does with each answer an acquire can get."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from broker_mqtt.queue.commands import Acquire
from broker_mqtt.queue.consumer import Consumer


@dataclass
class _Endpoint:
    id: uuid.UUID = field(default_factory=uuid.uuid4)


class ScriptedQueue:
    """Answers each acquire with the next of ``acquires`` (then with no message); every other write
    with None."""

    def __init__(self, acquires: list[Any]) -> None:
        self.endpoint = _Endpoint()
        self.name = "jobs"
        self.poll_interval = 0.05
        self._arrivals = 0
        self.acquires = acquires
        self.asked = 0

    async def write(self, command: Any) -> Any:
        await anyio.lowlevel.checkpoint()
        if isinstance(command, Acquire):
            self.asked += 1
            return self.acquires.pop(0) if self.acquires else []
        return None

    def _listen(self, delta: int) -> None:
        pass

    stopped = False

    async def wait_stopped(self) -> None:
        await anyio.sleep_forever()  # (a scripted queue never stops)

    async def _await_arrival(self, seen: int, timeout: float) -> None:
        await anyio.sleep(timeout)


@pytest.mark.anyio
async def test_an_acquire_answered_without_its_messages_is_retried_not_fatal(caplog: Any) -> None:
    # None: the answer a new master gives a repeated acquire whose answer it no longer holds
    queue = ScriptedQueue([None, [[7, "job-7", 1]]])
    with caplog.at_level(logging.WARNING, logger="broker_mqtt.queue"), anyio.fail_after(10):
        async with Consumer(queue, prefetch=1, lease=30.0) as deliveries:  # type: ignore[arg-type]  # an endpoint with an id only
            d = await deliveries.__anext__()
    assert (d.id, d.data, d.delivery_count) == (7, "job-7", 1)
    assert queue.asked >= 2
    assert "an acquire was answered None, not its messages" in caplog.text
