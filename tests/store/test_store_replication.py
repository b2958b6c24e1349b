"""Master and clones wired in memory over lossy channels: convergence, staleness, buffering."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import cbor2
import pytest
from _store_sim import StoreSim
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_mqtt.store import CloneLost, SQLiteBackend, Stale, Timeout, TypeClash, WriteBufferFull
from broker_mqtt.store.clone import CloneWriteFailed, PutUniqueAnswered, RequestError, Synced, WentStale
from broker_mqtt.store.commands import Erase, Increment, InsertInto, Push, Put
from broker_mqtt.store.master import RemoteWriteFailed


def state(entries: Any) -> list[tuple[bytes, bytes]]:
    return sorted((cbor2.dumps(e.key, canonical=True), cbor2.dumps(e.value, canonical=True)) for e in entries)


def assert_converged(sim: StoreSim) -> None:
    want = state(sim.master.snapshot())
    for cid, clone in sim.clones.items():
        assert not clone.stale, cid
        assert state(clone.backend.snapshot()) == want, cid


def test_clone_syncs_then_follows_master() -> None:
    sim = StoreSim()
    sim.master.execute(Put("before", 1), 0.0)
    clone = sim.add_clone("c1")
    assert clone.stale
    with pytest.raises(Stale):
        clone.get("before")
    assert clone.keys(allow_stale=True) == []
    sim.run_until_idle()
    assert clone.get("before") == 1 and sim.events["c1"] == [Synced(2)]
    sim.master.execute(Put("after", 2), sim.now)
    sim.run_until_idle()
    assert clone.get("after") == 2
    clone.execute(Increment("after", 3), sim.now)
    assert clone.get("after") == 2  # writes show once the master broadcasts them
    sim.run_until_idle()
    assert clone.get("after") == 5 and sim.master.get("after") == 5
    assert_converged(sim)


def random_ops(sim: StoreSim, seed: int, n_ops: int) -> int:
    import random

    rng = random.Random(seed)
    increments = 0
    t = 0.0
    for i in range(n_ops):
        t += rng.choice([0.0, 0.01, 0.1, 0.7])
        who = rng.choice(["M", *sim.clones])
        key = rng.choice(["a", "b", "c", ["k", 1]])
        op = rng.choice(["put", "erase", "inc", "push", "insert"])
        cmd: Any = {
            "put": Put(key, i), "erase": Erase(key), "inc": Increment("counter", 1), "push": Push("log", i),
            "insert": InsertInto("set", i % 7),
        }[op]
        increments += op == "inc"

        def act(s: StoreSim, who: str = who, cmd: Any = cmd) -> None:
            s.node(who).execute(cmd, s.now)

        sim_at(sim, t, act)
    return increments


def sim_at(sim: StoreSim, when: float, action: Any) -> None:
    while sim.now < when:
        sim.step()
    action(sim)
    sim.flush()


@settings(max_examples=int(os.environ.get("STORE_EXAMPLES", 12)), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_clones=st.integers(1, 3))
def test_clones_converge_under_loss_reorder_duplication(seed: int, n_clones: int) -> None:
    sim = StoreSim(seed=seed, loss=0.2, dup=0.1, max_delay=0.3)
    for i in range(n_clones):
        sim.add_clone(f"c{i}")
    sim.run_until(1.0)
    increments = random_ops(sim, seed, 60)
    sim.run_until_idle(limit=sim.now + 600)
    assert_converged(sim)
    assert sim.master.get("counter") == increments  # every increment applied exactly once
    assert not any(isinstance(e, (CloneLost,)) for e in sim.events["M"])


def test_put_unique_race_has_one_winner() -> None:
    sim = StoreSim(seed=3, loss=0.2, max_delay=0.2)
    a, b = sim.add_clone("a"), sim.add_clone("b")
    sim.run_until_idle()
    ra = a.put_unique("lock", "a", sim.now)
    rb = b.put_unique("lock", "b", sim.now)
    sim.flush()
    sim.run_until_idle()
    answers = [e for n in ("a", "b") for e in sim.events[n] if isinstance(e, PutUniqueAnswered)]
    assert sorted(e.inserted for e in answers) == [False, True]
    assert (ra, rb) == (1, 1)
    winner = "a" if PutUniqueAnswered(1, True) in sim.events["a"] else "b"
    assert sim.master.get("lock") == winner == a.get("lock") == b.get("lock")


def test_put_unique_times_out_without_master() -> None:
    sim = StoreSim()
    clone = sim.add_clone("c")
    sim.run_until_idle()
    sim.partitioned.add("M")
    rid = clone.put_unique("k", 1, sim.now)
    sim.run_until(sim.now + 11)
    [err] = [e for e in sim.events["c"] if isinstance(e, RequestError)]
    assert err.request_id == rid and isinstance(err.error, Timeout)


def test_writes_buffered_while_master_unreachable_then_applied() -> None:
    sim = StoreSim()
    clone = sim.add_clone("c", write_buffer=5)
    sim.run_until_idle()
    sim.partitioned.add("M")
    sim.run_until(sim.now + 30)  # long enough for both sides to give up on each other
    assert clone.stale and any(isinstance(e, WentStale) for e in sim.events["c"])
    assert CloneLost in {type(e) for e in sim.events["M"]}
    for _ in range(5):
        clone.execute(Increment("n", 1), sim.now)
    with pytest.raises(WriteBufferFull):
        clone.execute(Increment("n", 1), sim.now)
    sim.master.execute(Put("m", "meanwhile"), sim.now)
    sim.partitioned.clear()
    sim.run_until_idle(limit=sim.now + 60)
    assert sim.master.get("n") == 5 and clone.get("n") == 5 and clone.get("m") == "meanwhile"
    assert_converged(sim)


def test_clone_resyncs_after_missed_commands() -> None:
    sim = StoreSim(seed=5)
    clone = sim.add_clone("c")
    sim.run_until_idle()
    sim.partitioned.add("c")
    for i in range(10):
        sim.master.execute(Put(i, i), sim.now)
    sim.run_until(sim.now + 40)
    sim.partitioned.clear()
    sim.run_until_idle(limit=sim.now + 60)
    assert clone.get(9) == 9
    assert_converged(sim)


def test_retransmit_failure_triggers_resync() -> None:
    from broker_mqtt import channel as ch

    config = ch.ChannelConfig(heartbeat_interval=0.5, ack_interval=0.25, connection_timeout=40, buffer_size=2)
    sim = StoreSim(seed=9, config=config)
    sim.add_clone("c")
    sim.run_until_idle()
    sim.partitioned.add("c")
    for i in range(10):
        sim.master.execute(Put(i, i), sim.now)
    sim.run_until(sim.now + 1)
    sim.partitioned.clear()
    sim.run_until_idle(limit=sim.now + 60)
    assert any(isinstance(e, WentStale) for e in sim.events["c"])
    assert sum(isinstance(e, Synced) for e in sim.events["c"]) == 2
    assert_converged(sim)


def test_expiry_reaches_clones() -> None:
    sim = StoreSim()
    clone = sim.add_clone("c")
    sim.run_until_idle()
    sim.master.execute(Put("tmp", 1, 5.0), sim.now)
    sim.run_until_idle()
    assert clone.get("tmp") == 1
    sim.run_until(sim.now + 6)
    sim.run_until_idle()
    assert not clone.exists("tmp") and not sim.master.exists("tmp")


def test_late_clone_gets_snapshot() -> None:
    sim = StoreSim(seed=2, loss=0.2, max_delay=0.1)
    sim.add_clone("early")
    sim.run_until_idle()
    for i in range(20):
        sim.master.execute(Push("v", i), sim.now)
    late = sim.add_clone("late")
    sim.master.execute(Push("v", 20), sim.now)
    sim.run_until_idle(limit=300)
    assert late.get("v") == list(range(21))
    assert_converged(sim)


def test_sqlite_clone_and_master_persist(tmp_path: Path) -> None:
    with contextlib.closing(SQLiteBackend(tmp_path / "m.db")) as mb, \
            contextlib.closing(SQLiteBackend(tmp_path / "c.db")) as cb:
        sim = StoreSim(master_backend=mb)
        sim.add_clone("c", backend=cb)
        sim.run_until_idle()
        sim.master.execute(Put("k", {"v": 1}), sim.now)
        sim.master.execute(Increment("n", 2), sim.now)
        sim.run_until_idle()
    for path, seq in ((tmp_path / "m.db", 2), (tmp_path / "c.db", 2)):
        with contextlib.closing(SQLiteBackend(path)) as b:
            assert b.get("k") == {"v": 1} and b.get("n") == 2 and b.last_seq == seq


def test_remote_write_failure_reported_on_master_and_to_its_writer() -> None:
    sim = StoreSim()
    clone = sim.add_clone("c")
    sim.run_until_idle()
    sim.master.execute(Put("s", "text"), sim.now)
    clone.execute(Increment("s", 1), sim.now)
    clone.execute(Put("after", 1), sim.now)  # later writes still apply, in order
    sim.flush()
    sim.run_until_idle()
    [failed] = [e for e in sim.events["M"] if isinstance(e, RemoteWriteFailed)]
    assert failed.writer == clone.writer_id and isinstance(failed.error, TypeClash)
    assert clone.get("s") == "text" and clone.get("after") == 1
    [told] = [e for e in sim.events["c"] if isinstance(e, CloneWriteFailed)]
    assert isinstance(told.error, TypeClash) and "increment" in str(told.error)


def test_put_unique_answer_follows_its_effect() -> None:
    sim = StoreSim(seed=4, loss=0.2, max_delay=0.2)
    clone = sim.add_clone("c")
    sim.run_until_idle()
    rid = clone.put_unique("k", "v", sim.now)
    seen: list[Any] = []
    while not any(isinstance(e, PutUniqueAnswered) for e in sim.events["c"]):
        assert sim.now < 100
        sim.step()
        if any(isinstance(e, PutUniqueAnswered) for e in sim.events["c"]):
            seen.append(clone.get("k"))  # the effect is visible when the answer arrives
    assert sim.events["c"][-1] == PutUniqueAnswered(rid, True) and seen == ["v"]


def test_clone_execute_rejects_non_writes() -> None:
    from broker_mqtt.store.commands import Expire

    clone = StoreSim().add_clone("c")
    with pytest.raises(TypeError):
        clone.execute(Expire("k"), 0.0)  # type: ignore[arg-type]
