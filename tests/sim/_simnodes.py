"""In-process stand-ins for the node processes of tests/elected_node.py, for the simulated-time tests.

An :class:`ElectedNode` is one endpoint with a replica of an elected store, recording what the
process version prints (acknowledged pushes, masters seen) with simulated times; its writers pace
themselves (``pace`` simulated seconds between writes), else simulated time would never move.
:func:`check_converged` makes the assertions of tests/store/elected_procs.py.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import anyio

from broker_mqtt import Endpoint
from broker_mqtt.store import MasterChanged, attach_store
from broker_mqtt.store.elected import ElectedStore


class ElectedNode:
    """One replica of elected store ``store`` on ``ep``; ``run`` in a task group to write and watch."""

    def __init__(self, ep: Endpoint, store: ElectedStore) -> None:
        self.ep = ep
        self.store = store
        self.node_id = store.node_id
        self.acks: list[int] = []
        self.masters: list[tuple[int, str, float]] = []
        self._stop = anyio.Event()
        self._counter = itertools.count()

    @classmethod
    async def attach(cls, ep: Endpoint, name: str, mode: str, cycle: float, gap: float, **options: Any,
                     ) -> ElectedNode:
        n_hosts = options.pop("n_hosts", None)
        election = {"cycle": cycle, "gap": gap, **({"n_hosts": n_hosts} if n_hosts else {})}
        store = await attach_store(ep, name, mode=mode, election=election, write_timeout=60, **options)
        return cls(ep, store)

    def current_master(self) -> tuple[int, str, float] | None:
        return self.masters[-1] if self.masters else None

    async def watch(self) -> None:
        async with self.store.events(data=False) as events:
            if self.store.master is not None and self.store.epoch is not None:
                self.masters.append((self.store.epoch[0], self.store.master, anyio.current_time()))
            async for e in events:
                if isinstance(e, MasterChanged) and e.master is not None and e.epoch is not None:
                    self.masters.append((e.epoch[0], e.master, anyio.current_time()))

    async def writer(self, pace: float) -> None:
        """Push the next number onto ``log-<node id>`` until :meth:`quiet`; record each ack."""
        await self.store.await_master()
        key = f"log-{self.node_id}"
        while not self._stop.is_set():
            i = next(self._counter)
            await self.store.push(key, i)
            self.acks.append(i)
            await anyio.sleep(pace)

    def quiet(self) -> None:
        self._stop.set()


async def wait_for(predicate: Any, timeout: float, step: float = 0.05) -> bool:
    """Poll ``predicate`` every ``step`` simulated seconds for up to ``timeout``."""
    with anyio.move_on_after(timeout):
        while not predicate():
            await anyio.sleep(step)
        return True
    return False


async def check_converged(nodes: list[ElectedNode], all_nodes: list[ElectedNode]) -> dict[str, Any]:
    """Stop the writers; assert identical contents on ``nodes``, every acknowledged push of
    ``all_nodes`` present, none applied twice, in order, at most one master. Returns the contents."""
    for n in all_nodes:
        n.quiet()
    for n in nodes:
        assert await n.store.await_idle(30)
    dumps: list[dict[str, Any]] = []
    with anyio.move_on_after(60):  # the last records reach every replica a little after the writers stop
        while True:
            dumps = [{json.dumps(k): v for k, v in await n.store.items()} for n in nodes]
            if all(d == dumps[0] for d in dumps[1:]):
                break
            await anyio.sleep(0.1)
    reference = dumps[0]
    for d in dumps[1:]:
        assert d == reference
    for node in all_nodes:
        got = reference.get(json.dumps(f"log-{node.node_id}"), [])
        assert len(got) == len(set(got)), f"a write of {node.node_id} applied twice"
        assert got == sorted(got), f"writes of {node.node_id} out of order"
        missing = set(node.acks) - set(got)
        assert not missing, f"{len(missing)} acknowledged writes of {node.node_id} lost: {sorted(missing)[:10]}"
    for _ in range(5):  # a handover in progress may show two masters for a moment
        if sum(1 for n in nodes if n.store.is_master) <= 1:
            break
        await anyio.sleep(0.1)
    assert sum(1 for n in nodes if n.store.is_master) <= 1
    return reference


def master_of(nodes: list[ElectedNode]) -> str | None:
    seen = [m for n in nodes if (m := n.current_master())]
    return max(seen)[1] if seen else None
