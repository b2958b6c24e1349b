"""A replicated work queue: a dispatcher publishes jobs, two workers share them, one job is rejected.

Two nodes keep a replica of the queue "jobs" (one of them is its elected master); the workers only
publish and consume (``replica=False``). Each job is delivered to one worker; a job the worker cannot
do is rejected and lands in the dead-letter queue with the reason; if worker-a gets job 5 first it
gives it back, and job 5 is delivered again (to either worker) with its delivery count raised.

Run: python examples/queue_worker.py
"""

import anyio

from broker_mqtt import Endpoint
from broker_mqtt.queue import attach_queue

ELECTION = {"cycle": 1.0, "gap": 0.25}  # small, for a quick example; the default is cycle 10 s, gap 1.5 s


async def worker(ep: Endpoint, done: dict[str, list[int]], total: int, finished: anyio.Event) -> None:
    queue = await attach_queue(ep, "jobs", replica=False)
    async with queue.consume(prefetch=2) as deliveries:
        async for d in deliveries:
            job = d.data["job"]
            if job == 3:
                await d.reject("job 3 needs a GPU")
            elif job == 5 and d.delivery_count == 1 and ep.name == "worker-a":
                print(f"{ep.name}: giving job 5 back")
                await d.release()
            else:
                await anyio.sleep(0.01)  # the work
                await d.accept()
                done[ep.name].append(job)
                print(f"{ep.name}: did job {job} (id {d.id}, delivery {d.delivery_count})")
            if sum(map(len, done.values())) == total - 1:  # all but the rejected one
                finished.set()


async def main() -> None:
    async with Endpoint(name="dispatcher") as disp, Endpoint(name="standby") as standby, \
            Endpoint(name="worker-a") as a, Endpoint(name="worker-b") as b:
        queue = await attach_queue(disp, "jobs", election=ELECTION)
        spare = await attach_queue(standby, "jobs", election=ELECTION, candidate=False)  # confirms writes
        await queue.await_master(10)
        ids = await queue.publish_many([{"job": i} for i in range(1, 9)])
        print(f"dispatcher: published jobs 1-8 as ids {ids}")
        done: dict[str, list[int]] = {"worker-a": [], "worker-b": []}
        finished = anyio.Event()
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker, a, done, 8, finished)
                tg.start_soon(worker, b, done, 8, finished)
                await finished.wait()
                tg.cancel_scope.cancel()  # the workers leave (what they still hold goes back)
            await spare.store.await_idle(5)
        for dead in spare.dead_letters():
            print(f"dead letter: id {dead.id} {dead.data} after {dead.delivery_count} delivery: {dead.reason}")
        print(f"done: {sorted(done['worker-a'] + done['worker-b'])}; left in the queue: {spare.statistics()}")
        await spare.close()
        await queue.close()


if __name__ == "__main__":
    anyio.run(main)
