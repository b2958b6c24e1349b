"""The simulated-network protocol tests again, with every replica's entries on disk (``resident="disk"``).

A :class:`~broker_mqtt.store.versioned_disk.DiskState` must behave as the memory-resident state it
stands for in everything the replicas do with it: streamed snapshots (served from its file in key
order, staged into the joiner's file and taken in one step), claims, merges, tombstones and their
forgetting, expiries, crashes and restarts. These run the existing scenario tests and a slice of
each fuzzer's seeds with ``_elected_sim.RESIDENT = "disk"`` (``BROKER_MQTT_TEST_RESIDENT=disk`` runs
every simulated test so)."""

from __future__ import annotations

import _elected_sim
import pytest
import test_elected_claim_sources
import test_elected_fuzz
import test_elected_fuzz_ops
import test_elected_snapshot_stream
import test_elected_tombstones
from _elected_sim import SimNet, staged_entries

from broker_mqtt.store.commands import Put
from broker_mqtt.store.replication import ReplicaConfig

STREAM_TESTS = [
    "test_a_state_larger_than_a_chunk_joins_in_bounded_chunks",
    "test_a_lost_chunk_is_asked_again_not_the_whole_snapshot",
    "test_a_cut_mid_snapshot_resumes_from_the_last_key_held",
    "test_writes_during_a_snapshot_end_consistent_and_install_once",
    "test_a_new_master_mid_snapshot_restarts_it_cleanly",
    "test_tombstones_travel_in_the_stream",
    "test_a_joiner_builds_the_changes_of_a_snapshot_only_when_they_are_wanted",
]


@pytest.fixture
def on_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_elected_sim, "RESIDENT", "disk")


@pytest.mark.parametrize("name", STREAM_TESTS)
def test_snapshot_streaming_with_states_on_disk(name: str, on_disk: None) -> None:
    getattr(test_elected_snapshot_stream, name)()


TOMBSTONE_TESTS = [
    "test_no_ttl_keeps_every_tombstone",
    "test_a_split_shorter_than_the_ttl_does_not_bring_an_erased_key_back",
    "test_a_split_longer_than_the_ttl_brings_an_erased_key_back_with_its_old_value",
    "test_no_tombstone_is_forgotten_while_a_replica_joins",
    "test_a_pass_of_changes_since_before_a_forget_starts_over",
    "test_a_joiner_that_never_finishes_pauses_forgetting_only_for_a_while",
    "test_a_join_after_the_forget_pause_finishes_under_erase_load",
]


@pytest.mark.parametrize("name", TOMBSTONE_TESTS)
def test_tombstones_with_states_on_disk(name: str, on_disk: None) -> None:
    getattr(test_elected_tombstones, name)()


@pytest.mark.parametrize("seed", range(16))
def test_fuzzed_faults_with_states_on_disk(seed: int, on_disk: None) -> None:
    test_elected_fuzz.test_fuzzed_faults_lose_no_acknowledged_write_and_converge_on_one_master(seed)


@pytest.mark.parametrize("seed", range(8))
def test_erases_expiries_and_small_chunks_with_states_on_disk(seed: int, on_disk: None) -> None:
    test_elected_fuzz_ops.test_erases_expiries_small_chunks_and_skewed_clocks(seed)


def test_a_claims_snapshot_of_the_history_ahead_is_staged_on_disk_not_in_memory(on_disk: None) -> None:
    """c, on disk and behind by more than the master's log, claims: the one history ahead of it (a's)
    comes as a snapshot, which c installs as a follower does. It is staged in c's file as it comes,
    nothing decoded into memory (a claim of a large store on a small device). Before, a claim's
    snapshot was always built in memory, also when it was installed, not merged."""
    config = ReplicaConfig(snapshot_chunk=256, snapshot_window=2, log_keep=8)
    with SimNet(["a", "b", "c"], seed=11, config=config) as net:
        net.tag("a")
        net.run(1.0)
        net.partition({"a", "b"}, {"c"})
        for i in range(200):
            net.write("a", Put(f"k{i:03d}", i))
        net.run(1.0)
        c = net.nodes["c"].replica
        assert c.state.on_disk
        net.heal()
        net.untag("a")
        net.tag("c")
        seen: list[tuple[bool, bool, int, int]] = []  # (on disk, a claim's, decoded, staged) of each snapshot seen
        for _ in range(3000):
            net.run(0.005)
            for inc in list(c._snaps.values()):
                seen.append((inc.on_disk, inc.for_claim, len(inc.staged), staged_entries(inc)))
            if net.masters() == ["c"]:
                break
        claims = [s for s in seen if s[1]]
        assert claims and max(staged for *_, staged in claims) > 0, seen[-5:]  # the claim's snapshot came in chunks
        assert all(on_disk and decoded == 0 for on_disk, _, decoded, _ in claims)
        assert c.stats.snapshots_installed >= 1 and c.stats.merges == 0
        net.run(3.0)
        assert net.masters() == ["c"]
        for n in "abc":
            assert net.contents(n) == {f"k{i:03d}": i for i in range(200)}, n


@pytest.mark.parametrize("name", ["test_a_claims_snapshot_fetch_resumes_after_a_lost_chunk"])
def test_claim_sources_with_states_on_disk(name: str, on_disk: None) -> None:
    getattr(test_elected_claim_sources, name)()
