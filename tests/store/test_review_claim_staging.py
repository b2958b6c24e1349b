"""Review of 592f848: a claim's snapshot of the one history ahead staged in the claimant's file."""

from __future__ import annotations

from typing import Any

import pytest
from _elected_sim import SimNet

from broker_mqtt.store.commands import Put
from broker_mqtt.store.packing import pack
from broker_mqtt.store.replication import ReplicaConfig
from broker_mqtt.store.snapshot_stream import Incoming


def _claim_by_snapshot(resident: str, n: int = 200) -> tuple[SimNet, Any]:
    config = ReplicaConfig(snapshot_chunk=256, snapshot_window=2, log_keep=8)
    net = SimNet(["a", "b", "c"], seed=11, config=config, resident=resident)
    net.tag("a")
    net.run(1.0)
    net.partition({"a", "b"}, {"c"})
    for i in range(n):
        net.write("a", Put(f"k{i:03d}", i))
    net.run(1.0)
    net.heal()
    net.untag("a")
    net.tag("c")
    return net, net.nodes["c"].replica


@pytest.mark.parametrize("resident", ["memory", "disk"])
def test_a_claims_staged_snapshot_counts_its_entries(resident: str) -> None:
    """stats.snapshot_entries counts the entries of a claim's snapshot (a state on disk counts
    what it staged: _take_snapshot's entries is -1 then)."""
    net, c = _claim_by_snapshot(resident)
    with net:
        net.run(5.0)
        assert net.masters() == ["c"]
        assert c.stats.snapshots_installed == 1 and c.stats.merges == 0
        assert c.stats.snapshot_entries == 200, c.stats.snapshot_entries
        for n in "abc":
            assert net.contents(n) == {f"k{i:03d}": i for i in range(200)}, n


@pytest.mark.parametrize("resident", ["memory", "disk"])
def test_a_stale_followers_snapshot_with_chunks_to_stage_is_not_counted_malformed(resident: str) -> None:
    """A follower's snapshot still in _snaps (chunks taken, not staged) when a claim begins; the
    claim's snapshot begins a staging in the same file: the stale one must not be counted as a
    malformed message (nor break the claim)."""
    net, c = _claim_by_snapshot(resident)
    with net:
        # a follower's snapshot from x (a source that is gone), begun before the claim's, with a chunk taken
        stale = c._snaps["x.0"] = Incoming("x.0", (0, "x.0"), False, asked=(None, None), file=c.state)
        malformed = c.stats.malformed
        took = False
        for _ in range(3000):
            net.run(0.005)
            if not took and any(inc.for_claim for inc in c._snaps.values()):
                stale.take([(pack("zz"), None)], pack("zz"), (1, None))  # (taken before the claim's began)
                took = True
            if net.masters() == ["c"]:
                break
        assert took
        net.run(2.0)
        assert net.masters() == ["c"]
        for n in "abc":
            assert net.contents(n) == {f"k{i:03d}": i for i in range(200)}, n
        assert c.stats.malformed == malformed


def _net(resident: str, tmp_path: Any) -> SimNet:
    config = ReplicaConfig(snapshot_chunk=256, snapshot_window=2, log_keep=8)
    if resident == "file":  # memory-form states with a SQLite file each (open_state)
        return SimNet(["a", "b", "c"], seed=5, config=config, paths={n: tmp_path / f"{n}.db" for n in "abc"})
    return SimNet(["a", "b", "c"], seed=5, config=config, resident=resident)


@pytest.mark.parametrize("resident", ["memory", "file", "disk"])
@pytest.mark.parametrize("first", ["claim", "follower"])
def test_a_snapshot_cut_by_its_sources_death_then_a_claim_from_another(resident: str, first: str,
                                                                       tmp_path: Any) -> None:
    """c, behind by more than the log, takes a's state by snapshot (as a follower of a, or as a
    claimant fetching from a); a dies mid-stream; c (tagged) claims (again) and takes b's state:
    every acknowledged write is there, one master, nothing counted malformed."""
    with _net(resident, tmp_path) as net:
        net.tag("a")
        net.run(1.0)
        net.partition({"a", "b"}, {"c"})
        for i in range(300):
            net.write("a", Put(f"k{i:03d}", i))
        net.run(1.0)
        acked = set(net.nodes["a"].done)
        assert len(acked) == 300
        c = net.nodes["c"].replica
        net.heal()
        if first == "claim":
            net.untag("a")
            net.tag("c")
        src = None
        for _ in range(4000):
            net.run(0.002)
            src = next((inc.source for inc in c._snaps.values()
                        if inc.pending or len(inc.staged) or inc.staged_upto or inc.cursor), None)
            if src is not None:
                break
        else:
            raise AssertionError("no snapshot")
        assert [inc.for_claim for inc in c._snaps.values()] == [first == "claim"]
        gone = src.split(".")[0]
        net.kill(gone)
        if first == "follower":
            net.tag("c")
        net.run(10.0)
        assert net.masters() == ["c"]
        assert c.stats.malformed == 0
        for n in {"a", "b", "c"} - {gone}:
            assert net.contents(n) == {f"k{i:03d}": i for i in range(300)}, n
