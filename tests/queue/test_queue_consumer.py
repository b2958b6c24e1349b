"""A consumer against a scripted queue: what it does with each answer an acquire can get."""

from __future__ import annotations

import itertools
import logging
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from broker_mqtt.queue import MessageState
from broker_mqtt.queue.commands import Acquire, Publish, ReleaseOwner, Settle, SettleAndAcquire
from broker_mqtt.queue.consumer import Consumer
from broker_mqtt.queue.model import MessageRecord, index_for, new_marker
from broker_mqtt.store import NoMaster
from broker_mqtt.store.errors import AnswerForgotten, StoreDecodeError, error_from_wire
from broker_mqtt.store.versioned import VersionedState

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_queue_commands import run  # noqa: E402 - what a master does with one write


@dataclass
class _Endpoint:
    id: uuid.UUID = field(default_factory=uuid.uuid4)


class ScriptedQueue:
    """Answers each acquire with the next of ``acquires`` (then with no message), a settle-and-acquire
    with every settlement done and the next of them; every other write with None."""

    def __init__(self, acquires: list[Any]) -> None:
        self.endpoint = _Endpoint()
        self.name = "jobs"
        self.poll_interval = 0.05
        self._arrivals = 0
        self.master = "m"
        self.acquires = acquires
        self.asked = 0

    async def write(self, command: Any) -> Any:
        await anyio.lowlevel.checkpoint()
        if isinstance(command, Acquire):
            self.asked += 1
            return self.acquires.pop(0) if self.acquires else []
        if isinstance(command, SettleAndAcquire):
            self.asked += 1
            return [[None] * len(command.items), self.acquires.pop(0) if self.acquires else []]
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


class MasterQueue:
    """A queue whose writes a master computes and applies at once (``tests/queue/test_queue_commands.py``'s
    way), with the master's lease chore (an expired owner's messages released every 0.02 s), the
    event loop's clock as the wall clock, and a publisher. The acquires numbered in ``forget`` are
    applied and then answered :class:`AnswerForgotten`, as a master answers a repeat whose answer
    neither its state nor its log holds any more (after an outage under load)."""

    def __init__(self, forget: set[int]) -> None:
        self.endpoint = _Endpoint()
        self.name = "jobs"
        self.poll_interval = 0.05
        self._arrivals = 0
        self.master = "m"  # (a replica id: another one after a failover or a handover)
        self.state = VersionedState()
        self.forget = forget
        self.acquires = 0
        self.forgotten: set[int] = set()  # the ids the forgotten acquires took

    async def write(self, command: Any) -> Any:
        await anyio.lowlevel.checkpoint()
        before = {k for k, r in _records(self.state).items() if r.state is MessageState.ACQUIRED}
        answer = run(self.state, command, anyio.current_time())
        if isinstance(command, (Acquire, SettleAndAcquire)):
            self.acquires += 1
            if self.acquires in self.forget:
                taken = {k for k, r in _records(self.state).items() if r.state is MessageState.ACQUIRED} - before
                self.forgotten |= taken
                raise AnswerForgotten(f"acquire {self.acquires}: applied, its answer forgotten")
        return answer

    async def publish_every(self, interval: float) -> None:
        for i in itertools.count():
            run(self.state, Publish([f"job-{i}"], None, new_marker()), anyio.current_time())
            self._arrivals += 1
            await anyio.sleep(interval)

    async def lease_chore(self) -> None:
        while True:
            await anyio.sleep(0.02)
            now = anyio.current_time()
            for owner in index_for(self.state).expired_owners(now):
                run(self.state, ReleaseOwner(owner, "lease expired", True), now)

    def _listen(self, delta: int) -> None:
        pass

    stopped = False

    async def wait_stopped(self) -> None:
        await anyio.sleep_forever()

    async def _await_arrival(self, seen: int, timeout: float) -> None:
        await anyio.sleep(min(timeout, 0.01))


def _records(state: VersionedState) -> dict[int, MessageRecord]:
    out: dict[int, MessageRecord] = {}
    for key, value in state.items():
        rec = MessageRecord.from_wire(value) if isinstance(key, int) else None
        if rec is not None:
            out[key] = rec
    return out


@pytest.mark.anyio
async def test_messages_an_acquire_took_whose_answer_was_forgotten_come_back_while_the_consumer_stays_busy() -> None:
    # The consumer never learns which messages that acquire took. Before, it went on acquiring as the
    # same owner, and every acquire that got a message restarted that owner's lease: while messages
    # kept coming, the lease never ran out and those messages stayed acquired for ever. Now an acquire
    # of unknown outcome retires its owner: acquires go on as a new one, the old one's lease is renewed
    # only while this consumer holds messages it got, then runs out, and the master hands them out again.
    queue = MasterQueue(forget={2})  # (the first: messages held, and renewed, as it happens)
    accepted: set[int] = set()
    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.publish_every, 0.002)
        tg.start_soon(queue.lease_chore)
        with anyio.fail_after(10):  # (a lease and a half: it is renewed every third of it)
            async with Consumer(queue, prefetch=4, lease=1.5) as deliveries:  # type: ignore[arg-type]  # (a stand-in queue)
                async for d in deliveries:
                    d.accept_nowait()
                    accepted.add(d.id)
                    if queue.forgotten and queue.forgotten <= accepted:
                        break
                assert not await deliveries.drain()
        tg.cancel_scope.cancel()
    assert queue.forgotten, "the forgotten acquire took messages"
    owners = {r.owner for r in _records(queue.state).values() if r.state is MessageState.ACQUIRED}
    assert not owners, owners  # the consumer left: it released what it held, under every owner


@pytest.mark.anyio
async def test_a_settle_batch_across_two_owners_keeps_the_answers_of_the_write_that_went_through() -> None:
    # A batch holds settlements of a retired owner and of the current one: two writes. When the second
    # fails, the first's settlements were applied: they keep their answers, and only the second's get
    # the error (before, the batch's error went to every settlement in it).
    class TwoOwners(ScriptedQueue):
        async def write(self, command: Any) -> Any:
            await anyio.lowlevel.checkpoint()
            if isinstance(command, Settle) and command.owner == "new":
                raise NoMaster("no master answered")
            return [None] * len(command.items)

    consumer = Consumer(TwoOwners([]), prefetch=1, lease=30.0)  # type: ignore[arg-type]  # (a stand-in queue)
    answers = await consumer._settle_batch([("old", [1, "accept", None, 1], 230), ("old", [2, "accept", None, 1], 230),
                                            ("new", [3, "accept", None, 1], 230)])
    assert answers[:2] == [None, None] and isinstance(answers[2], NoMaster)
    with pytest.raises(NoMaster):  # the first write failing: as before, the batch's error
        await consumer._settle_batch([("new", [3, "accept", None, 1], 230), ("old", [1, "accept", None, 1], 230)])



class SettlingQueue(ScriptedQueue):
    """A ScriptedQueue whose settle writes answer every settlement (None: done), once ``gate`` is set."""

    def __init__(self, acquires: list[Any]) -> None:
        super().__init__(acquires)
        self.gate = anyio.Event()
        self.gate.set()

    async def write(self, command: Any) -> Any:
        if isinstance(command, (Settle, SettleAndAcquire)):
            await self.gate.wait()
        if isinstance(command, Settle):
            return [None] * len(command.items)
        return await super().write(command)


@pytest.mark.anyio
async def test_tasks_iterating_one_consumer_together_all_get_deliveries_and_all_end_when_it_closes() -> None:
    # Each waiting task used to put a new event in place of the one the others waited on: a delivery
    # woke only the last task to wait, and the others waited for ever, even once the consumer closed
    # (a fan-out of workers over one consumer hung when it left the consumer's block).
    queue = SettlingQueue([])
    got: list[int] = []
    all_in = anyio.Event()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async with Consumer(queue, prefetch=1, lease=30.0) as consumer:  # type: ignore[arg-type]  # (a stand-in queue)

                async def worker() -> None:
                    async for d in consumer:
                        got.append(d.id)
                        await d.accept()
                        if len(got) == 6:
                            all_in.set()

                for _ in range(3):
                    tg.start_soon(worker)
                await anyio.wait_all_tasks_blocked()  # every worker waits for a delivery (the queue is empty)
                queue.acquires += [[[i, ["m", i], 1]] for i in range(1, 7)]
                await all_in.wait()
            # (leaving the consumer's block ends every worker's iteration, so the task group ends)
    assert sorted(got) == list(range(1, 7))


@pytest.mark.anyio
async def test_concurrent_drains_all_return() -> None:
    # Two drains waiting at once: each used to replace the event the other waited on, so one never woke.
    queue = SettlingQueue([[[1, "a", 1], [2, "b", 1]]])
    queue.gate = anyio.Event()  # settlements are decided once both drains wait
    results: list[Any] = []
    with anyio.fail_after(10):
        async with Consumer(queue, prefetch=2, lease=30.0) as consumer:  # type: ignore[arg-type]  # (a stand-in queue)
            for d in [await consumer.__anext__(), await consumer.__anext__()]:
                d.accept_nowait()

            async def drain() -> None:
                results.append(await consumer.drain())

            async with anyio.create_task_group() as tg:
                tg.start_soon(drain)
                tg.start_soon(drain)
                await anyio.wait_all_tasks_blocked()
                queue.gate.set()
    assert results == [[], []]


@pytest.mark.anyio
async def test_each_of_two_concurrent_drains_returns_the_failures_of_the_settlements_made_before_it() -> None:
    """Drain A is called after two settlements, drain B after two more; all four fail, decided
    together (one settle write carries them all). Before, the first drain to return took all four
    failures and the other got none."""
    queue = SettlingQueue([[[i, f"m{i}", 1] for i in range(1, 5)]])
    queue.gate = anyio.Event()  # the settle write is never answered here: the test decides them
    results: dict[str, list[int]] = {}
    with anyio.fail_after(10):
        async with Consumer(queue, prefetch=4, lease=30.0) as consumer:  # type: ignore[arg-type]  # (a stand-in queue)
            ds = [await consumer.__anext__() for _ in range(4)]

            async def drain(name: str) -> None:
                results[name] = [d.id for d, _ in await consumer.drain()]

            async with anyio.create_task_group() as tg:
                for d in ds[:2]:
                    d.accept_nowait()
                tg.start_soon(drain, "A")
                await anyio.wait_all_tasks_blocked()
                for d in ds[2:]:
                    d.accept_nowait()
                tg.start_soon(drain, "B")
                await anyio.wait_all_tasks_blocked()
                for d in ds:  # (what the settle write's answers do: NotHeld for each)
                    consumer._settled(d, "taken back")
            queue.gate.set()
    assert results == {"A": [1, 2], "B": [3, 4]}


# -- settlements that carry the acquire (SettleAndAcquire) ----------------------------------------------


class CountingQueue(MasterQueue):
    """A MasterQueue holding ``n`` messages from the start, counting its writes by kind."""

    def __init__(self, n: int) -> None:
        super().__init__(forget=set())
        run(self.state, Publish([f"job-{i}" for i in range(n)], None, new_marker()), 0.0)
        self.kinds: dict[str, int] = {}

    async def write(self, command: Any) -> Any:
        self.kinds[type(command).__name__] = self.kinds.get(type(command).__name__, 0) + 1
        return await super().write(command)


async def _accept_all(queue: Any, n: int, prefetch: int, lease: float = 30.0) -> tuple[Consumer, list[Any]]:
    """Consume with accept_nowait until ``n`` messages were handed out and the queue holds no
    message; the consumer and what its drains reported."""
    failures: list[Any] = []
    with anyio.fail_after(20):
        async with Consumer(queue, prefetch=prefetch, lease=lease) as consumer:  # type: ignore[arg-type]  # (a stand-in queue)
            seen = 0
            async for d in consumer:
                d.accept_nowait()
                seen += 1
                if seen >= n:
                    failures += await consumer.drain()
                    if not _records(queue.state):
                        break
    return consumer, failures


@pytest.mark.anyio
async def test_a_busy_consumer_acquires_in_its_settle_writes() -> None:
    queue = CountingQueue(600)
    _, failures = await _accept_all(queue, 600, prefetch=20)
    assert not failures and not _records(queue.state)  # every message accepted, once
    kinds = queue.kinds
    # the window refills in the settle writes: about one write per half window, not two
    assert kinds["SettleAndAcquire"] > 2 * kinds.get("Acquire", 0), kinds
    assert kinds["SettleAndAcquire"] + kinds.get("Settle", 0) + kinds.get("Acquire", 0) < 600 // 10 * 1.5, kinds


class EarlierMasterQueue(CountingQueue):
    """A master of a version before SettleAndAcquire: it refuses one, applying nothing, as an unknown
    command kind is refused (StoreDecodeError)."""

    async def write(self, command: Any) -> Any:
        if isinstance(command, SettleAndAcquire):
            self.kinds["refused"] = self.kinds.get("refused", 0) + 1
            await anyio.lowlevel.checkpoint()
            raise StoreDecodeError("unexpected store message kind 'queue_settle_acquire'")
        return await super().write(command)


@pytest.mark.anyio
async def test_against_a_master_of_an_earlier_version_it_settles_and_acquires_apart(caplog: Any) -> None:
    queue = EarlierMasterQueue(300)
    with caplog.at_level(logging.INFO, logger="broker_mqtt.queue"):
        _, failures = await _accept_all(queue, 300, prefetch=20)
    assert not failures and not _records(queue.state)  # the refused write's settlements went again
    assert queue.kinds["refused"] == 1  # asked once, then never again
    assert queue.kinds["Settle"] > 1 and queue.kinds["Acquire"] > 1
    assert "does not know settle-and-acquire writes" in caplog.text


class UpgradedMasterQueue(EarlierMasterQueue):
    """An earlier version's master that, after ``switch_after`` writes, hands over to a master that
    knows SettleAndAcquire (the replicas upgraded after the consumers)."""

    def __init__(self, n: int, switch_after: int) -> None:
        super().__init__(n)
        self.switch_after = switch_after
        self.writes = 0
        self.after: dict[str, int] = {}  # the writes the next master got, by kind

    async def write(self, command: Any) -> Any:
        self.writes += 1
        if self.writes > self.switch_after:
            self.master = "m2"
        if self.master == "m2":
            self.after[type(command).__name__] = self.after.get(type(command).__name__, 0) + 1
            return await CountingQueue.write(self, command)
        return await super().write(command)


@pytest.mark.anyio
async def test_after_a_refusal_it_asks_the_next_master_again(caplog: Any) -> None:
    queue = UpgradedMasterQueue(600, switch_after=20)
    with caplog.at_level(logging.INFO, logger="broker_mqtt.queue"):
        _, failures = await _accept_all(queue, 600, prefetch=20)
    assert not failures and not _records(queue.state)
    assert queue.kinds["refused"] == 1  # the earlier master was asked once
    assert queue.after["SettleAndAcquire"] > 2 * queue.after.get("Acquire", 0), queue.after  # the next: carried again
    assert "settle writes carry the acquire again" in caplog.text


class HandedOverWhileRefusingQueue(CountingQueue):
    """An earlier version's master that refuses the first SettleAndAcquire and, before its refusal
    reaches the consumer, hands over to a master that knows the command."""

    async def write(self, command: Any) -> Any:
        if isinstance(command, SettleAndAcquire) and self.master == "m":
            self.kinds["refused"] = self.kinds.get("refused", 0) + 1
            await anyio.lowlevel.checkpoint()
            self.master = "m2"
            raise StoreDecodeError("unexpected store message kind 'queue_settle_acquire'")
        return await super().write(command)


@pytest.mark.anyio
async def test_a_refusal_that_arrives_after_a_handover_is_held_against_the_master_that_refused() -> None:
    """The consumer notes the master its write went to, not the one in place when the refusal came
    back (the next one then settled and acquired apart for as long as it was master)."""
    queue = HandedOverWhileRefusingQueue(400)
    _, failures = await _accept_all(queue, 400, prefetch=20)
    assert not failures and not _records(queue.state)
    assert queue.kinds["refused"] == 1
    assert queue.kinds["SettleAndAcquire"] > 2 * queue.kinds.get("Acquire", 0), queue.kinds


class LostAnswerQueue(CountingQueue):
    """Applies its first SettleAndAcquire and then fails it (NoMaster: the outcome is unknown to the
    consumer), with the master's lease chore running."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.lost: list[Any] = []  # [settled ids, acquired ids] of the lost write
        self.lost_owner = ""

    async def write(self, command: Any) -> Any:
        answer = await super().write(command)
        if isinstance(command, SettleAndAcquire) and not self.lost:
            self.lost = [[item[0] for item in command.items], [m[0] for m in answer[1]]]
            self.lost_owner = command.owner
            raise NoMaster("no master answered")
        return answer


@pytest.mark.anyio
async def test_a_settle_write_whose_outcome_is_unknown_fails_its_settlements_and_retires_the_owner() -> None:
    queue = LostAnswerQueue(200)
    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.lease_chore)
        consumer, failures = await _accept_all(queue, 200, prefetch=20, lease=0.5)
        tg.cancel_scope.cancel()
    settled, acquired = queue.lost
    assert settled and acquired
    assert sorted(d.id for d, _ in failures) == sorted(settled)  # reported: their outcome is unknown
    assert all(isinstance(error, NoMaster) for _, error in failures)
    assert consumer.owner != queue.lost_owner  # retired: what that write took comes back once its lease ends
    assert not _records(queue.state)  # ... and was delivered again, and accepted
    assert queue.kinds["SettleAndAcquire"] > 1  # (and the consumer went on settling with acquires)


class EarlierMasterOverTheWireQueue(CountingQueue):
    """A master of a version before SettleAndAcquire, as its writer's answer reaches the consumer:
    the master's StoreDecodeError travels as an error answer (``StoreError.to_wire``: code and text)
    and the writer rebuilds it with ``error_from_wire`` (``store/writer_core.py``), by its code."""

    async def write(self, command: Any) -> Any:
        if isinstance(command, SettleAndAcquire):
            self.kinds["refused"] = self.kinds.get("refused", 0) + 1
            await anyio.lowlevel.checkpoint()
            refused = StoreDecodeError("unexpected store message kind 'queue_settle_acquire'")
            raise error_from_wire(refused.to_wire())
        return await super().write(command)


@pytest.mark.anyio
async def test_an_earlier_masters_refusal_as_the_writer_raises_it_settles_apart(caplog: Any) -> None:
    """Before: the refusal arrived as StoreProtocolError (StoreDecodeError has no code of its own),
    not the StoreDecodeError the consumer waited for: each combined write failed its settlements
    (NotHeld never, but StoreProtocolError for every one) and retired the owner, again and again."""
    queue = EarlierMasterOverTheWireQueue(300)
    with caplog.at_level(logging.INFO, logger="broker_mqtt.queue"):
        consumer, failures = await _accept_all(queue, 300, prefetch=20)
    assert not failures and not _records(queue.state)
    assert queue.kinds["refused"] == 1  # asked once, then never again
    assert not consumer._retired  # nothing of unknown outcome: the master applied nothing


class CutQueue(ScriptedQueue):
    """Every acquire (plain or with settlements) is answered with 2 messages of 12 kB, as a master
    cuts an acquire at half a record; the first at once, the others once ``go`` is set. Notes when
    an acquire is placed while another waits for its answer."""

    def __init__(self) -> None:
        super().__init__([])
        self.next_id = 1
        self.waiting = 0
        self.overlapped = anyio.Event()
        self.go = anyio.Event()
        self.placed = 0

    async def write(self, command: Any) -> Any:
        if isinstance(command, Settle):
            return [None] * len(command.items)
        if not isinstance(command, (Acquire, SettleAndAcquire)):
            return await super().write(command)
        self.placed += 1
        if self.waiting:
            self.overlapped.set()
        if self.placed > 1:
            self.waiting += 1
            try:
                await self.go.wait()
            finally:
                self.waiting -= 1
        got = [[i, "x" * 12_000, 1] for i in (self.next_id, self.next_id + 1)]
        self.next_id += 2
        return got if isinstance(command, Acquire) else [[None] * len(command.items), got]


@pytest.mark.anyio
async def test_while_acquires_are_cut_by_their_size_the_next_goes_once_a_records_worth_is_free() -> None:
    # Messages of 12 kB: a record carries 2 of them. An acquire asked for the whole free window (and
    # got 2), and the next waited for half the window: one acquire in flight while the application
    # settled what it had, then waited for messages (in review: 200 messages took 1.12 s instead
    # of 0.59 s). Now, while acquires are cut so, each asks for what a record carries and the next
    # goes once that many places are free, two in flight, also while settlements are on their way.
    queue = CutQueue()
    with anyio.fail_after(10):
        async with Consumer(queue, prefetch=10, lease=30.0) as consumer:  # type: ignore[arg-type]  # (a stand-in queue)
            for _ in range(2):  # the first acquire's 2 (the second acquire waits for its answer)
                (await consumer.__anext__()).accept_nowait()
            await queue.overlapped.wait()  # 2 places free: an acquire goes beside the waiting one
            queue.go.set()
    assert queue.placed >= 3


class MixedQueue(CountingQueue):
    """A MasterQueue holding ``small`` messages of 1 byte, then ``large`` of ``size`` bytes, each write
    taking 2 ms; notes each acquire as ``(kind, asked, got)``."""

    def __init__(self, small: int, large: int, size: int) -> None:
        super().__init__(0)
        run(self.state, Publish(["s"] * small, None, new_marker()), 0.0)
        run(self.state, Publish(["x" * size] * large, None, new_marker()), 0.0)
        self.acquired: list[tuple[str, int, int]] = []

    async def write(self, command: Any) -> Any:
        await anyio.sleep(0.002)
        answer = await super().write(command)
        if isinstance(command, Acquire):
            self.acquired.append(("Acquire", command.n, len(answer)))
        elif isinstance(command, SettleAndAcquire):
            self.acquired.append(("SettleAndAcquire", command.n, len(answer[1])))
        return answer


@pytest.mark.anyio
async def test_an_acquire_cut_behind_settlements_does_not_make_a_record_carry_fewer() -> None:
    # Small messages, then 5 kB ones (a record of its own carries 4). The first acquire the large
    # ones cut rode on a settle write of 100 settlements, which left it room for 3: the consumer
    # took 3 for what a record carries, asked for 3 from then on, and never saw an acquire cut
    # again to correct it (a third more acquire writes; 12 kB messages behind enough settlements:
    # 1 a write, not 2).
    queue = MixedQueue(300, 40, 5000)
    consumer, failures = await _accept_all(queue, 340, prefetch=100)
    assert not failures and not _records(queue.state)
    assert consumer._per_record == 4, queue.acquired
    plain = [got for kind, _, got in queue.acquired if kind == "Acquire" and got]
    assert plain.count(4) >= 7, queue.acquired


def test_only_answers_cut_to_a_few_large_messages_switch_to_acquiring_a_records_worth() -> None:
    # 190 small messages fill half a record: a window larger than that (prefetch 1000) keeps
    # acquiring in its settle writes; 2 of 12 kB (a record's worth) switch it to asking for 2 at a
    # time, two in flight; a record's worth of small ones again switches it back.
    consumer = Consumer(ScriptedQueue([]), prefetch=1000, lease=30.0)  # type: ignore[arg-type]  # (a stand-in queue)
    owner = consumer.owner
    assert consumer._take(owner, [[i, ["job", i], 1] for i in range(190)], 400, 0) is False  # cut, not dry
    assert consumer._per_record is None and consumer._worth() == 250
    assert consumer._take(owner, [[i, "x" * 12_000, 1] for i in (1000, 1001)], 250, 0) is False
    assert consumer._per_record == 2 and consumer._worth() == 2 and consumer._asking(250) == 2
    assert consumer._take(owner, [[i, "y", 1] for i in (1002,)], 1, 0) is False  # asked fewer: says nothing
    assert consumer._per_record == 2
    assert consumer._take(owner, [[i, "y", 1] for i in (1003, 1004)], 2, 0) is False
    assert consumer._per_record is None and consumer._asking(250) == 250
    assert consumer._take(owner, [], 250, 0) is True  # dry
