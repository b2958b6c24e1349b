"""WriteRounds: writes placed by many tasks, answered by round, woken one round per loop pass."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from broker_mqtt.store.write_rounds import ROUND_WRITES, WriteRounds

pytestmark = pytest.mark.anyio


def test_a_round_holds_at_most_round_writes_and_ends_when_the_pump_runs() -> None:
    rounds = WriteRounds()
    opened = [n for n in range(1, 151) if rounds.place(n)]
    assert opened == [1, 1 + ROUND_WRITES, 1 + 2 * ROUND_WRITES]
    rounds.end_round()
    assert rounds.place(151)  # the pump ran: the next write opens a round, however full the last
    assert not rounds.place(152)


async def test_rounds_answered_together_wake_one_round_per_loop_pass() -> None:
    """Three rounds answered at once: the first round's tasks run in the next pass, the second's
    one pass later, the third's after that (so the first round's next writes are sent before the
    second round's tasks run), and every task gets its own outcome."""
    rounds = WriteRounds()
    done: list[tuple[int, Any]] = []

    async def writer(n: int) -> None:
        done.append((n, await rounds.outcome(n)))

    ns = list(range(1, 3 * ROUND_WRITES + 1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rounds.run)
        for n in ns:
            rounds.place(n)
            tg.start_soon(writer, n)
        await anyio.wait_all_tasks_blocked()
        assert done == []
        for n in ns:
            rounds.answer(n, ("ok", n * 10))
        rounds.wake()
        woken = []
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
            woken.append(len(done))
        assert woken == [ROUND_WRITES, 2 * ROUND_WRITES, 3 * ROUND_WRITES]
        assert done == [(n, ("ok", n * 10)) for n in ns]
        tg.cancel_scope.cancel()


async def test_a_cancelled_writer_is_forgotten_and_closing_fails_the_rest() -> None:
    rounds = WriteRounds()
    outcomes: dict[int, Any] = {}

    async def writer(n: int) -> None:
        outcomes[n] = await rounds.outcome(n)

    async with anyio.create_task_group() as tg:
        tg.start_soon(rounds.run)
        rounds.place(1)
        rounds.place(2)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await rounds.outcome(1)  # cancelled at once: write 1 is forgotten
        tg.start_soon(writer, 2)
        await anyio.wait_all_tasks_blocked()
        rounds.answer(1, ("ok", "late"))  # its caller is gone: ignored
        rounds.fail_all(("error", "closed"))
        await anyio.wait_all_tasks_blocked()
        assert outcomes == {2: ("error", "closed")}
        tg.cancel_scope.cancel()


async def test_a_round_answered_in_two_parts_wakes_its_rest_together() -> None:
    """Half a round answered (its log message split between two): its other half waits on one new
    event, shared, so that it wakes in one loop pass when answered, not one pass per write."""
    rounds = WriteRounds()
    done: list[int] = []

    async def writer(n: int) -> None:
        await rounds.outcome(n)
        done.append(n)

    ns = list(range(1, ROUND_WRITES + 1))
    half = ROUND_WRITES // 2
    async with anyio.create_task_group() as tg:
        tg.start_soon(rounds.run)
        for n in ns:
            rounds.place(n)
            tg.start_soon(writer, n)
        await anyio.wait_all_tasks_blocked()
        for n in ns[:half]:
            rounds.answer(n, ("ok", None))
        rounds.wake()
        await anyio.wait_all_tasks_blocked()
        assert done == ns[:half]
        for n in ns[half:]:
            rounds.answer(n, ("ok", None))
        rounds.wake()
        await anyio.lowlevel.checkpoint()
        assert done == ns
        tg.cancel_scope.cancel()


async def test_closing_keeps_the_answers_already_in() -> None:
    """Rounds answered and queued for waking when the store closes: their writes keep their
    answers; only the unanswered fail."""
    rounds = WriteRounds()
    outcomes: dict[int, Any] = {}

    async def writer(n: int) -> None:
        outcomes[n] = await rounds.outcome(n)

    async with anyio.create_task_group() as tg:
        tg.start_soon(rounds.run)
        for n in range(1, 2 * ROUND_WRITES + 2):
            rounds.place(n)
            tg.start_soon(writer, n)
        await anyio.wait_all_tasks_blocked()
        for n in range(1, 2 * ROUND_WRITES + 1):
            rounds.answer(n, ("ok", n))
        rounds.wake()  # the first round now, the second one pass later
        rounds.fail_all(("error", "closed"))
        await anyio.wait_all_tasks_blocked()
        assert outcomes == {**{n: ("ok", n) for n in range(1, 2 * ROUND_WRITES + 1)},
                            2 * ROUND_WRITES + 1: ("error", "closed")}
        tg.cancel_scope.cancel()
