"""Group commit (broker_mqtt.queue.batching) on its own: no network, no real sleeps."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from broker_mqtt.queue.batching import GroupCommit

pytestmark = pytest.mark.anyio


async def test_concurrent_items_share_writes_in_order_and_get_their_own_answers() -> None:
    batches: list[list[Any]] = []
    gate = anyio.Event()

    async def send(items: list[Any]) -> list[Any]:
        batches.append(list(items))
        await gate.wait()
        return [item * 10 for item in items]

    gc = GroupCommit(send, in_flight=1, max_batch=3)
    results: dict[int, Any] = {}

    async def submit(i: int) -> None:
        results[i] = await gc.submit(i)

    async with anyio.create_task_group() as tg:
        tg.start_soon(gc.run)
        for i in range(7):
            tg.start_soon(submit, i)
        await anyio.wait_all_tasks_blocked()
        gate.set()
        with anyio.fail_after(30):
            while len(results) < 7:
                await anyio.lowlevel.checkpoint()
            await gc.wait_idle()
        tg.cancel_scope.cancel()
    assert results == {i: i * 10 for i in range(7)}
    assert [x for b in batches for x in b] == list(range(7))  # submission order kept
    assert [len(b) for b in batches] == [3, 3, 1]  # gathered while one write was in flight, max_batch 3


async def test_a_failed_write_fails_every_item_of_its_batch_only() -> None:
    async def send(items: list[Any]) -> list[Any]:
        if "bad" in items:
            raise ValueError("refused")
        return items

    gc = GroupCommit(send, in_flight=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(gc.run)
        with pytest.raises(ValueError, match="refused"):
            await gc.submit("bad")
        assert await gc.submit("good") == "good"
        tg.cancel_scope.cancel()


async def test_items_placed_without_waiting_share_the_writes_and_report_their_outcome() -> None:
    batches: list[list[Any]] = []

    async def send(items: list[Any]) -> list[Any]:
        batches.append(list(items))
        if "bad" in items:
            raise ValueError("refused")
        return [item * 2 for item in items]

    gc = GroupCommit(send, in_flight=1)
    reports: list[tuple[Any, Any]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(gc.run)
        for item in ("a", "b"):
            gc.submit_nowait(item, lambda outcome, item=item: reports.append((item, outcome)))
        assert await gc.submit("c") == "cc"  # waited for in the same write as the two before it
        gc.submit_nowait("bad", lambda outcome: reports.append(("bad", outcome)))
        with anyio.fail_after(30):
            await gc.wait_idle()
        tg.cancel_scope.cancel()
    assert batches == [["a", "b", "c"], ["bad"]]
    assert reports[:2] == [("a", "aa"), ("b", "bb")]
    assert reports[2][0] == "bad" and isinstance(reports[2][1], ValueError)


async def test_a_batch_holds_items_up_to_max_cost_and_one_item_always() -> None:
    """A consumer's settlements go in writes whose records fit the broker: batches are cut by the
    items' cost (an item past max_cost alone goes alone)."""
    batches: list[list[Any]] = []

    async def send(items: list[Any]) -> list[Any]:
        batches.append(list(items))
        return items

    gc = GroupCommit(send, in_flight=1, max_cost=10)
    results: dict[int, Any] = {}

    async def submit(i: int, cost: int) -> None:
        results[i] = await gc.submit(i, cost)

    async with anyio.create_task_group() as tg:
        for i, cost in enumerate([4, 4, 4, 20, 1, 5]):
            tg.start_soon(submit, i, cost)
        await anyio.wait_all_tasks_blocked()  # all placed before the sending task starts
        tg.start_soon(gc.run)
        with anyio.fail_after(30):
            while len(results) < 6:
                await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()
    assert batches == [[0, 1], [2], [3], [4, 5]]
    assert results == {i: i for i in range(6)}


async def test_a_batch_cancelled_on_its_way_reports_an_error_to_its_nowait_items() -> None:
    """Cancelled while its write is on its way (a consumer's block cancelled from outside), a batch
    has neither answers nor an error: its items submitted without waiting are told the outcome is
    unknown. Before, the report indexed the missing answers (IndexError out of the task group)."""
    reports: list[Any] = []

    async def send(items: list[Any]) -> list[Any]:
        await anyio.sleep_forever()
        raise AssertionError

    gc = GroupCommit(send, in_flight=1)
    with anyio.move_on_after(0.05):
        async with anyio.create_task_group() as tg:
            tg.start_soon(gc.run)
            gc.submit_nowait("a", reports.append)
            await anyio.sleep_forever()
    assert len(reports) == 1 and isinstance(reports[0], Exception)
    await gc.wait_idle()  # (nothing left gathered or in flight)



async def test_wait_idle_waits_for_an_item_placed_as_soon_as_the_previous_batch_is_answered() -> None:
    """``busy`` and ``wait_idle`` follow every item. Placing wakes the sending task once, not once an
    item, and a batch gathered while another was on its way goes out without that wake-up; the
    submitter of that batch, answered, places the next item before the sending task runs again:
    that item still makes the group busy, and ``wait_idle`` waits for it (a consumer's leaving waits
    for its settlements so)."""
    gates: list[anyio.Event] = []
    reports: list[Any] = []
    idle_before_c: list[bool] = []

    async def send(items: list[Any]) -> list[Any]:
        gate = anyio.Event()
        gates.append(gate)
        await gate.wait()
        return [item.upper() for item in items]

    gc = GroupCommit(send, in_flight=1)

    async def submit_b_then_c() -> None:
        reports.append(await gc.submit("b"))  # gathered while "a" is on its way
        gc.submit_nowait("c", reports.append)
        assert gc.busy
        await gc.wait_idle()
        idle_before_c.append("C" not in reports)

    async with anyio.create_task_group() as tg:
        tg.start_soon(gc.run)
        gc.submit_nowait("a", reports.append)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(submit_b_then_c)
        await anyio.wait_all_tasks_blocked()
        with anyio.fail_after(30):
            for k in range(3):
                while len(gates) <= k:
                    await anyio.lowlevel.checkpoint()
                gates[k].set()
                await anyio.wait_all_tasks_blocked()
        assert reports == ["A", "B", "C"] and idle_before_c == [False]
        tg.cancel_scope.cancel()
