"""Publisher (broker_mqtt.queue.publishing) on its own: a writer core places its writes, no network."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from broker_mqtt.queue.publishing import Publisher
from broker_mqtt.store.commands import WriteCommand
from broker_mqtt.store.errors import BackendError
from broker_mqtt.store.writer_core import WriterCore
from broker_mqtt.wire.data import Count

pytestmark = pytest.mark.anyio


def _nested(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("deep", [_nested(382, Count(1)), _nested(383)], ids=["382+tag", "383"])
async def test_an_item_the_writer_refuses_fails_alone_among_concurrent_publishes(deep: Any) -> None:
    """An item that each alone passes ``checked_size`` but that the writer refuses when placed inside
    a ``Publish`` (its wire adds two lists; a tag, a Count's here, is a level to the decoders, which
    the placement's check counts since ``checked_copy``): it fails alone, the items published with it
    are published. Before, none was found at fault and the whole batch failed with its BackendError."""
    core = WriterCore("w", "o", 0.0)
    placed: list[int] = []

    async def write(command: WriteCommand) -> Any:
        placed.append(core.write(command, 0.0))
        return 10 * len(placed)

    publisher = Publisher(write, lambda size: None, None)
    answers: dict[int, Any] = {}

    async def publish(i: int, data: Any) -> None:
        try:
            answers[i] = await publisher.publish(data)
        except BackendError as exc:
            answers[i] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(publisher.run)
        await anyio.wait_all_tasks_blocked()
        for i, data in enumerate(["a", deep, ["b"]]):  # together: one group-committed batch
            tg.start_soon(publish, i, data)
        with anyio.fail_after(30):
            while len(answers) < 3:
                await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()
    assert isinstance(answers.pop(1), BackendError)
    assert answers == {0: 10, 2: 11}
