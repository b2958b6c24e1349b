"""Log readers over a real mosquitto: the API in one process, then a reader process (tests/queue/log_node.py)
killed for real with SIGKILL between reading and committing, and a new one of the same name continuing.

Assertions are about which messages are read, in which order, and what the queue keeps; never about speed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from queue_procs import QueueProc, wait_for

from broker_mqtt import Endpoint
from broker_mqtt.queue import LogEntry, MessageState, QueueError, UnknownReader, WorkQueue, attach_queue
from broker_mqtt.queue.commands import CommitReader
from broker_mqtt.store.errors import StoreProtocolError
from broker_mqtt.transport.embedded import EmbeddedBroker

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from line_procs import LineProc  # noqa: E402 - tests/ holds the shared process helpers

pytestmark = [pytest.mark.mosquitto]

ELECTION = {"cycle": 1.0, "gap": 0.25}


async def accept(q: WorkQueue, n: int) -> list[int]:
    """Consume and accept ``n`` messages; their ids."""
    got: list[int] = []
    async with q.consume(prefetch=n) as deliveries:
        async for d in deliveries:
            await d.accept()
            got.append(d.id)
            if len(got) == n:
                break
    return got


@pytest.mark.anyio
async def test_in_process_api(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b, \
            Endpoint(broker, namespace=namespace) as c:
        qa = await attach_queue(a, "jobs", election=ELECTION)
        qb = await attach_queue(b, "jobs", election=ELECTION, candidate=False)
        qc = await attach_queue(c, "jobs", election=ELECTION, replica=False)
        with anyio.fail_after(60):
            assert await qa.await_master() and await qb.await_master() and await qc.await_master()
            # bad input: clear errors, nothing registered
            for bad in ("", "a/b", "x" * 201):
                with pytest.raises(ValueError, match="log reader's name"):
                    await qa.register_reader(bad)
                with pytest.raises(ValueError, match="log reader's name"):
                    qa.read_log(bad)
            with pytest.raises(ValueError, match="start is"):
                await qa.register_reader("audit", start="latest")
            with pytest.raises(QueueError, match="needs a replica"):
                qc.read_log("audit")
            with pytest.raises(UnknownReader, match="no log reader 'nobody'"):
                async with qb.read_log("nobody"):
                    pass
            # a malformed command sent anyway fails with a clear error; the queue lives on
            with pytest.raises(StoreProtocolError, match="log reader's name"):
                await qb.write(CommitReader("a/b", 1))

            assert await qa.publish({"before": 0}) == 1
            assert await accept(qa, 1) == [1]                     # erased: no reader yet
            assert await qc.register_reader("audit") == 1          # through a replica-less handle
            assert await qc.register_reader("audit", start="next") == 1  # idempotent
            ids = await qc.publish_many([{"job": i} for i in range(5)])
            assert ids == [2, 3, 4, 5, 6]
            assert sorted(await accept(qc, 5)) == ids              # accepted by a consumer...
            assert await qa.store.await_idle(10) and await qb.store.await_idle(10)
            assert qb.statistics().retained == 5 and qb.statistics().ready == 0
            assert qb.readers() == {"audit": 1}

            async with qb.read_log("audit") as log:                 # ... and still read, in id order
                assert log.position == 1
                entries: list[LogEntry] = [await log.__anext__() for _ in ids]
                assert [(e.id, e.data, e.state, e.delivery_count) for e in entries] == [
                    (i, {"job": k}, MessageState.DONE, 1) for k, i in enumerate(ids)]
                assert await log.commit(entries[2].id) == 4        # erases 2, 3, 4
                with pytest.raises(QueueError, match="last id published is 6"):
                    await log.commit(99)
                # reading waits for what comes next, and sees it whatever its state
                async with anyio.create_task_group() as tg:
                    more: list[LogEntry] = []

                    async def read_one() -> None:
                        more.append(await log.__anext__())

                    tg.start_soon(read_one)
                    await anyio.sleep(0.1)
                    assert not more
                    assert await qa.publish({"job": 5}) == 7
                assert [(e.id, e.state) for e in more] == [(7, MessageState.READY)]
            assert await qa.store.await_idle(10)
            assert qa.statistics().retained == 2 and qa.readers() == {"audit": 4}   # 5 and 6: read, not committed

            # a reader of the same name, elsewhere, continues after the last commit
            async with qa.read_log("audit") as log:
                assert log.position == 4
                assert [(await log.__anext__()).id for _ in range(3)] == [5, 6, 7]
                assert await log.commit() == 7                     # the last entry read
            assert await qa.store.await_idle(10)
            assert qa.statistics().retained == 0 and qa.statistics().ready == 1

            # removing a reader lets go of what no remaining reader still has to read
            assert await qa.register_reader("slow", start="next") == 7
            assert await qa.publish({"job": 6}) == 8
            assert sorted(await accept(qb, 2)) == [7, 8]            # 7 erased (both readers past it), 8 kept
            assert await qa.store.await_idle(10)
            assert qa.statistics().retained == 1
            async with qa.read_log("slow") as log:
                assert log.position == 7
                assert await qc.remove_reader("slow") is True
                assert await qc.remove_reader("slow") is False
                with pytest.raises(UnknownReader):
                    await log.commit(8)
            assert await qa.store.await_idle(10)
            assert qa.statistics().retained == 1 and qa.readers() == {"audit": 7}  # audit has not read 8
            assert await qa.remove_reader("audit") is True
            assert await qa.store.await_idle(10)
            assert qa.statistics().retained == 0 and qa.readers() == {}
            assert await qa.publish({"job": 7}) == 9
            assert await accept(qb, 1) == [9]
            assert await qa.store.await_idle(10)
            assert len(qa.store) == 1                               # no reader: accept erases (only next-id)
        await qc.close()
        await qb.close()
        await qa.close()


class LogProc(LineProc):
    """A log reader process (tests/queue/log_node.py) and what it printed."""

    def __init__(self, url: str, namespace: str, queue: str, reader: str, *args: str) -> None:
        self.read: list[tuple[int, str, Any]] = []
        self.committed: list[int] = []
        self.opened: int | None = None
        super().__init__([sys.executable, str(HERE / "log_node.py"), url, namespace, queue, reader, *args])

    def _line(self, kind: str, rest: str) -> None:
        if kind == "READ":
            msg_id, state, data = rest.split(" ", 2)
            value = json.loads(data)
            self.read.append((int(msg_id), state, tuple(value) if isinstance(value, list) else value))
        elif kind == "COMMITTED":
            self.committed.append(int(rest))
        elif kind == "OPENED":
            self.opened = int(rest)


@pytest.fixture
def procs() -> Any:
    started: list[LineProc] = []

    def start(cls: type[LineProc], *args: Any) -> Any:
        p = cls(*args)
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()


def test_reader_killed_after_committing_some_a_new_one_continues_after_the_last_commit(
        broker: EmbeddedBroker, namespace: str, procs: Any) -> None:
    n, limit = 40, 15
    url = broker.url
    master = procs(QueueProc, url, namespace, "jobs")                    # the only candidate
    master.wait_ready()
    first = procs(LogProc, url, namespace, "jobs", "audit", "--commit-limit", str(limit))
    first.wait_ready()
    assert wait_for(lambda: first.opened is not None, 30)               # registered before anything is published
    pub = procs(QueueProc, url, namespace, "jobs", "--no-candidate", "--publish", str(n), "--concurrency", "1")
    consumer = procs(QueueProc, url, namespace, "jobs", "--no-replica", "--consume", "accept")
    assert wait_for(lambda: len(consumer.accepted()) == n, 60)
    assert wait_for(lambda: len(first.read) == n and len(first.committed) == limit, 60)
    ids = [pub.published[("p", i)] for i in range(n)]
    assert ids == sorted(ids)                                            # one publisher, awaited in turn
    # every message was read, in id order, although a consumer accepted it
    assert [(i, d) for i, _, d in first.read] == [(i, ("p", k)) for k, i in enumerate(ids)]
    assert first.committed == ids[:limit]
    # the queue keeps what the reader has not committed: accepted, not erased
    assert wait_for(lambda: first.dump()["retained"] == n - limit, 30), first.dumps[-1]
    assert first.dumps[-1]["readers"] == {"audit": ids[limit - 1]}

    first.kill()                                                          # kill -9, between read and commit
    second = procs(LogProc, url, namespace, "jobs", "audit")
    assert wait_for(lambda: len(second.committed) == n - limit, 60), (second.opened, second.read[:3])
    assert second.opened == ids[limit - 1]
    # read again: exactly what was read and not committed; nothing committed is read twice
    assert [i for i, _, _ in second.read] == ids[limit:]
    assert {s for _, s, _ in second.read} == {"done"}                    # accepted long ago, kept for it
    assert second.committed == ids[limit:]
    assert wait_for(lambda: second.dump()["retained"] == 0, 30), second.dumps[-1]   # then let go
    assert second.dumps[-1]["readers"] == {"audit": ids[-1]}
