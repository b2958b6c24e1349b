"""A streamed snapshot over a real mosquitto: a store larger than the chunk size joins a new replica
in chunks of at most that size, with writes going on, and the joiner installs it once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from broker_mqtt import Endpoint
from broker_mqtt.store import attach_store
from broker_mqtt.store.replication import ReplicaConfig
from broker_mqtt.transport.embedded import EmbeddedBroker

pytestmark = [pytest.mark.mosquitto]

HB = 0.125
CONFIG = ReplicaConfig(heartbeat=HB, member_timeout=4 * HB, claim_timeout=0.5, log_keep=100,
                       snapshot_chunk=8192, snapshot_window=3)


@pytest.mark.anyio
@pytest.mark.parametrize("resident", ["memory", "disk"])
async def test_a_store_larger_than_a_chunk_joins_over_mosquitto(namespace: str, resident: str,
                                                                tmp_path: Path) -> None:
    """The broker takes no packet over 32 KB: the ~400 KB state could not travel as one message.
    ``disk``: both replicas keep their entries in their SQLite files only, and the joiner, reopened
    from its file, holds the state without another snapshot."""
    election = {"cycle": 1.0, "gap": 0.25}
    with EmbeddedBroker(max_packet_size=32 * 1024) as broker:
        await _join(broker, namespace, election, resident, tmp_path)


async def _join(broker: EmbeddedBroker, namespace: str, election: dict[str, float], resident: str,
                tmp_path: Path) -> None:
    files: dict[str, Any] = {"memory": {}, "disk": {"backend": "sqlite", "resident": "disk"}}[resident]
    async with Endpoint(broker.url, namespace=namespace) as a, Endpoint(broker.url, namespace=namespace) as b:
        sa = await attach_store(a, "big", election=election, durability="master", config=CONFIG,
                                **files, **({"path": tmp_path / "a.db"} if files else {}))
        assert await sa.await_master(15)
        for start in range(0, 3000, 500):
            async with anyio.create_task_group() as tg:
                for i in range(start, start + 500):
                    tg.start_soon(sa.put, f"k{i:05}", f"{i:0100d}")
        sb = await attach_store(b, "big", election=election, durability="master", candidate=False, config=CONFIG,
                                **files, **({"path": tmp_path / "b.db"} if files else {}))
        for i in range(200):  # writes while it joins: they reach it by the final burst or the log
            await sa.put(f"k{(i * 13) % 3000:05}", i)
        with anyio.fail_after(60):
            while len(sb) < 3000 or sb.stale or dict(await sb.items()) != dict(await sa.items()):
                await anyio.sleep(0.05)
        stats = sb.statistics()
        assert stats.snapshots_installed == 1 and stats.snapshot_entries >= 3000  # ~400 KB in 8 KB chunks
        await sb.close()
        if files:  # reopened: what its file holds, brought up to date from the log, no snapshot
            sb = await attach_store(b, "big", election=election, durability="master", candidate=False,
                                    config=CONFIG, **files, path=tmp_path / "b.db")
            assert len(sb) >= 3000
            await sa.put("after", 1)
            with anyio.fail_after(60):
                while sb.stale or dict(await sb.items()) != dict(await sa.items()):
                    await anyio.sleep(0.05)
            assert sb.statistics().snapshots_installed == 0
            await sb.close()
        await sa.close()
