"""Elected-store replication (sans-io) in simulated time: handover, crashes, migrations, fencing, splits.

The test plays the election (tag/untag), so every scenario is exact and repeatable; the same
replica runs under the real actor and mosquitto in ``test_elected_live.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import heapq
import time
import uuid
from typing import Any

import pytest
from _elected_sim import SimNet, record_sends

from broker_mqtt.queue.commands import Publish
from broker_mqtt.store import replica_master
from broker_mqtt.store.commands import Erase, Increment, Push, Put, PutUnique
from broker_mqtt.store.errors import (
    AnswerForgotten,
    BackendError,
    StoreDecodeError,
    StoreError,
    TypeClash,
    error_from_wire,
)
from broker_mqtt.store.history import Version
from broker_mqtt.store.put_batch import BATCH_BYTES
from broker_mqtt.store.record_log import RecordLog, op_count
from broker_mqtt.store.replica_messages import LOG_GROUP
from broker_mqtt.store.replication import NoMaster, Replica, ReplicaConfig, StaleChanged, WriteDone
from broker_mqtt.store.versioned import RESULTS_KEPT, Clock, Record, VersionedState, fork_seq
from broker_mqtt.store.versioned_sqlite import open_state
from broker_mqtt.store.writer_core import WriterCore


class Load:
    """Every writer pushes 0, 1, 2, ... onto its own list ``log-<writer>``: a non-idempotent write,
    so a write applied twice shows as a repeated number and a lost one as a missing number."""

    def __init__(self, net: SimNet, writers: list[str]) -> None:
        self.net = net
        self.writers = writers
        self.issued: dict[str, dict[int, int]] = {w: {} for w in writers}  # writer -> n -> i

    def step(self, dt: float = 0.01) -> None:
        for w in self.writers:
            if w in self.net.dead or self.net.nodes[w].paused is not None:
                continue
            i = len(self.issued[w])
            n = self.net.write(w, Push(f"log-{w}", i))
            self.issued[w][n] = i
        self.net.run(dt)

    def run(self, duration: float, dt: float = 0.01) -> None:
        for _ in range(round(duration / dt)):
            self.step(dt)

    def acked(self, w: str) -> set[int]:
        return {self.issued[w][n] for n in self.net.nodes[w].done if n in self.issued[w]}

    def check(self, survivors: list[str]) -> None:
        reference = self.net.contents(survivors[0])
        for s in survivors[1:]:
            assert self.net.contents(s) == reference, f"{s} differs from {survivors[0]}"
        for w in self.writers:
            got = reference.get(f"log-{w}", [])
            assert len(got) == len(set(got)), f"a write of {w} was applied twice: {got}"
            assert got == sorted(got), f"writes of {w} applied out of order: {got}"
            missing = self.acked(w) - set(got)
            assert not missing, f"acknowledged writes of {w} lost: {sorted(missing)}"


def settle(net: SimNet, seconds: float = 3.0) -> None:
    net.run(seconds)


class _NotData:
    """Outside the data model: no CBOR encoding."""


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("command", [Put(_NotData(), 1, None), Put("k", _NotData(), None),
                                     Publish([1, _NotData()]), Put("k", {"nested": [_NotData()]}, None),
                                     Put("k", datetime.date(2024, 1, 2), None),  # (cbor2 encodes it; decoders refuse it)
                                     Put("\ud800", 1, None),  # (a lone surrogate: no UTF-8)
                                     Put("k", 1, decimal.Decimal(5)),  # (the expiry is in its wire too)
                                     Put("k", _nested(399), None)])  # (decoded alone; not in a log record)
def test_a_write_outside_the_data_model_is_refused_when_placed_and_breaks_nothing(command: Any) -> None:
    """At the master, the write was applied before anything encoded it: its key failed to pack
    and left the write queued (every later step raised again), or its value failed in the loop that
    sent the log (an EncodeError, which tore the endpoint down), or was logged and refused by every
    follower's decoder (a date). Now the call raises BackendError, and queues nothing."""
    with SimNet(["a", "b"], seed=5) as net:
        net.run(0.5)
        net.tag("a")
        net.run(1.0)
        for node in ("a", "b"):  # the master's own writer, and a follower's
            with pytest.raises(BackendError, match="cannot encode"):
                net.nodes[node].replica.write(command, net.now)
            n = net.write(node, Put("after", node, None))
            net.run(1.0)
            assert n in net.nodes[node].done
        assert net.contents("a") == net.contents("b") == {"after": "b"}
    writer = WriterCore("w", "o", 0.0)  # a writer without a replica: nothing queued either
    with pytest.raises(BackendError, match="cannot encode"):
        writer.write(command, 0.0)
    assert writer.pending == 0 and writer.to_send() == []


def test_a_value_nested_as_deep_as_the_data_model_allows_travels_in_a_log_message() -> None:
    """382 containers deep (VALUE_DEPTH less the put's own list and a margin): accepted when placed,
    and its log record, in a log message through the codec, decodes; past 384 it is refused when placed
    (above); at 399 the command alone decoded, but in a log message it passed the decoders' limit of 400."""
    from broker_mqtt.store.history import Record
    from broker_mqtt.store.replica_messages import Log, decode, encode
    from broker_mqtt.wire import codec

    WriterCore("w", "o", 0.0).write(Put("deep", _nested(382), None), 0.0)
    record = Record(1, (1, "m"), 1, "o", "w", 1, ("put", "deep", _nested(382), None))
    message = decode(codec.decode(codec.encode(encode(Log((1, "m"), [record])))))
    assert isinstance(message, Log) and message.records[0].op[2] == _nested(382)
    deeper = Record(1, (1, "m"), 1, "o", "w", 1, ("put", "deep", _nested(399), None))
    with pytest.raises(codec.DecodeError):
        codec.decode(codec.encode(encode(Log((1, "m"), [deeper]))))


def test_a_writes_size_is_checked_unless_it_is_a_small_plain_put() -> None:
    """``check_size`` sees every write over 4 KiB: a long text, a big int (a bignum), a list."""
    sizes: list[int] = []
    writer = WriterCore("w", "o", 0.0)
    for command in (Put("k", 1, None), Put("k", "x" * 100, 5.0), Put("k", "x" * 10_000, None),
                    Put("k", 1 << 40_000, None), Put("k", ["x" * 100] * 100, None)):
        writer.write(command, 0.0, check_size=sizes.append)
    assert len(sizes) == 3 and sizes[0] >= 10_000 and sizes[1] >= 5_000 and sizes[2] >= 10_000


def test_one_master_serves_writes_from_every_node() -> None:
    net = SimNet(["a", "b", "c"], seed=1)
    net.run(0.5)
    net.tag("a")
    load = Load(net, ["a", "b", "c"])
    load.run(1.0)
    settle(net)
    assert net.masters() == ["a"]
    load.check(["a", "b", "c"])
    for w in "abc":
        assert len(load.acked(w)) == len(load.issued[w]) == 100
        assert net.nodes[w].replica.idle


def test_writes_before_any_master_wait_and_then_apply_once() -> None:
    net = SimNet(["a", "b"], seed=2)
    load = Load(net, ["b"])
    load.run(0.5)
    assert not net.nodes["b"].done
    net.tag("a")
    settle(net)
    load.check(["a", "b"])
    assert len(load.acked("b")) == 50


def test_graceful_handover_to_a_caught_up_node_copies_no_data() -> None:
    net = SimNet(["a", "b", "c"], seed=3)
    net.tag("a")
    load = Load(net, ["b", "c"])
    load.run(1.0)
    settle(net, 1.0)
    sent = net.sent
    net.untag("a")
    net.tag("b")
    net.run(0.5)
    assert net.masters() == ["b"]
    # an epoch change: claim, promises, active, heartbeats, acks - no tail and no snapshot
    kinds = [m[0] for q in [net._queue] for *_, m in q]
    assert "snap" not in kinds and "schunk" not in kinds and "tail" not in kinds
    assert net.sent - sent < 40
    load.run(1.0)
    settle(net)
    load.check(["a", "b", "c"])
    assert net.nodes["c"].replica.epoch == net.nodes["b"].replica.epoch == (2, "b.0")


@pytest.mark.parametrize("batch", [0.0, 0.005])
@pytest.mark.parametrize("seed", range(5))
def test_master_crash_under_load_loses_no_acknowledged_write(seed: int, batch: float) -> None:
    """(``batch``: each node handles what reaches it within 5 ms before it sends, as the anyio
    layer drains once for a PUBLISH's messages, not after each.)"""
    net = SimNet(["a", "b", "c", "d"], seed=seed, latency=(0.001, 0.02), batch=batch)
    net.tag("a")
    load = Load(net, ["b", "c", "d"])
    load.run(1.0)
    net.kill("a")
    load.run(0.3)  # no master: writes wait
    net.tag(net.rng.choice(["b", "c", "d"]))
    load.run(1.0)
    settle(net)
    load.check(["b", "c", "d"])
    for w in "bcd":  # every write issued by a survivor was eventually acknowledged
        assert len(load.acked(w)) == len(load.issued[w])


def test_a_write_that_cannot_be_placed_fails_with_no_master() -> None:
    net = SimNet(["a", "b"], seed=4, config=ReplicaConfig(write_timeout=2.0))
    n = net.write("b", Put("k", 1))
    net.run(3.0)
    assert isinstance(net.nodes["b"].failed[n], NoMaster)


@pytest.mark.parametrize("batch", [0.0, 0.005])
def test_100_forced_migrations_under_load_lose_and_duplicate_nothing(batch: float) -> None:
    names = ["a", "b", "c", "d"]
    net = SimNet(names, seed=5, latency=(0.001, 0.01), batch=batch)
    load = Load(net, names)
    current = "a"
    net.tag(current)
    masters = set()
    for i in range(100):
        load.run(0.1)
        net.untag(current)
        load.run(0.02)
        current = names[(i + 1) % len(names)]
        net.tag(current)
        masters.add(current)
    load.run(0.2)
    settle(net)
    load.check(names)
    assert masters == set(names)
    assert net.nodes["a"].replica.epoch[0] == 101
    for w in names:
        assert len(load.acked(w)) == len(load.issued[w]) > 300


def test_a_paused_deposed_master_changes_nothing_when_it_resumes() -> None:
    net = SimNet(["a", "b", "c"], seed=6)
    net.tag("a")
    load = Load(net, ["b", "c"])
    load.run(0.5)
    settle(net, 1.0)
    net.pause("a")  # SIGSTOP: it still believes it is master
    net.tag("b")
    load.run(0.5)
    # the deposed master accepts a write of its own and broadcasts it in its old epoch
    node_a = net.nodes["a"]
    node_a.replica.write(Put("fenced", "from a"), net.now)
    for msg in node_a.replica.to_send():
        for other in ("b", "c"):
            net.nodes[other].replica.handle(msg, net.now)
            net._flush(other)
    assert not net.nodes["b"].replica.state.exists("fenced")
    assert not net.nodes["c"].replica.state.exists("fenced")
    net.resume("a")
    net.untag("a")  # its election catches up: Detag
    load.run(0.5)
    settle(net)
    assert net.masters() == ["b"]
    load.check(["a", "b", "c"])
    # the paused node's own write was not lost either: re-sent to the new master, applied once
    assert net.contents("b")["fenced"] == "from a"


def test_records_a_deposed_master_applied_before_it_read_the_claim_keep_their_epoch() -> None:
    """A paused master wakes to writes and, behind them, a new master's claim: it applies the
    writes as master of its old epoch, then adopts the claim, all before it sends anything. Its
    records went out in a log message of the new epoch, past every follower's fence, and were
    applied among the new master's records at the same seqs: the replicas diverged unseen, and an
    acknowledged increment was overwritten (found by ``test_elected_fuzz.py``'s seeds). They now go
    out under their own epoch (fenced followers ignore them), and a log message whose records are
    not all of its epoch is refused as malformed."""
    net = SimNet(["a", "b", "c", "d"], seed=1)
    net.tag("c")
    net.run(1.0)
    net.pause("c")  # SIGSTOP the master
    for i in range(6):  # one write message each, waiting at c
        net.nodes["b"].replica.write(Put(f"b{i}", i) if i < 4 else Increment("n", 1), net.now)
        net._flush("b")
    net.run(0.1)
    net.tag("a")  # a claims; its claim waits at c behind b's writes
    net.run(1.2)
    n = net.write("d", Increment("n", 1))
    net.run(0.5)
    assert n in net.nodes["d"].done
    net.resume("c")  # c applies b's writes as master of its epoch, then adopts a's claim
    net.untag("c")
    net.run(5.0)
    assert net.masters() == ["a"]
    contents = [net.contents(x) for x in "abcd"]
    assert all(c == contents[0] for c in contents)
    assert contents[0]["n"] == 3 and all(contents[0][f"b{i}"] == i for i in range(4))
    for x in "abcd":
        epochs = [e for e, _ in net.nodes[x].replica.state.lineage]
        assert epochs == sorted(epochs), (x, epochs)  # a history's epochs only grow
    record = Record(1, (1, "c.0"), 1, "o", "w", 1, ("put", "k", 1, None))
    with pytest.raises(StoreDecodeError):
        net.nodes["b"].replica.handle(["log", [2, "a.0"], [record.to_wire()]], net.now)


def test_split_heal_merges_deterministically_and_reports_conflicts() -> None:
    names = ["a", "b", "c", "d"]
    net = SimNet(names, seed=7)
    net.tag("a")
    net.write("a", Put("shared", 0))
    net.write("a", Put("gone", 1))
    settle(net, 1.0)
    net.partition({"a", "b"}, {"c", "d"})
    net.run(1.5)  # the c/d side forgets the a/b side
    net.tag("c")  # each side has its own master
    net.run(1.0)
    assert sorted(net.masters()) == ["a", "c"]
    net.write("b", Put("shared", "ab"))
    net.run(0.2)
    net.write("d", Put("shared", "cd"))  # later: wins by its clock
    net.write("b", Put("only-ab", 1))
    net.write("d", Put("only-cd", 2))
    net.write("d", Erase("gone"))
    settle(net, 1.0)
    assert net.contents("a")["shared"] == "ab" and net.contents("c")["shared"] == "cd"
    net.heal()
    net.untag("a")  # the election settles on one node (RecoverEvent, Detag)
    settle(net, 4.0)
    assert net.masters() == ["c"]
    reference = net.contents("a")
    assert reference == {"shared": "cd", "only-ab": 1, "only-cd": 2}
    for n in names:
        assert net.contents(n) == reference
        assert [c.key for c in net.nodes[n].conflicts] == ["shared"], n
        conflict = net.nodes[n].conflicts[0]
        assert conflict.chosen.value == "cd" and conflict.other.value == "ab"
    assert sum(net.nodes[n].replica.stats.merges for n in names) == 1  # one merge settles it


def _split_over_a_list(resolver: Any) -> SimNet:
    """Both sides of a split write the list ``shared`` (the c/d side later, so it wins by its
    clock), and the c/d side alone ``one-side``; healed, c merges the histories with ``resolver``."""
    names = ["a", "b", "c", "d"]
    net = SimNet(names, seed=7, resolver=resolver)
    net.tag("a")
    net.write("a", Put("shared", [0]))
    net.write("a", Put("one-side", [0, 0, 0]))
    settle(net, 1.0)
    net.partition({"a", "b"}, {"c", "d"})
    net.run(1.5)
    net.tag("c")
    net.run(1.0)
    net.write("b", Put("shared", [1, 2]))
    net.run(0.2)
    net.write("d", Put("shared", [3]))
    net.write("d", Put("one-side", [5]))
    settle(net, 1.0)
    net.heal()
    net.untag("a")
    settle(net, 4.0)
    assert net.masters() == ["c"]
    return net


def _longest(key: Any, a: Version, b: Version) -> Version:
    return a if len(a.value or ()) >= len(b.value or ()) else b


def _union(key: Any, a: Version, b: Version) -> Version:
    """A new value under the winner's stamp; a tuple, which every replica holds as a list."""
    return dataclasses.replace(a, value=tuple(sorted({*(a.value or ()), *(b.value or ())})))


def _extended(key: Any, a: Version, b: Version) -> Version:
    """Changes the value it was given (a copy: the state's is not touched) and returns it."""
    a.value.append((9,))
    return a


@pytest.mark.parametrize(("resolver", "merged"), [(_longest, [1, 2]), (_union, [1, 2, 3]), (_extended, [3, [9]])])
def test_a_custom_resolver_decides_a_healed_split_on_every_replica(resolver: Any, merged: list[int]) -> None:
    """The resolver decides the key both sides wrote, and only that one: ``one-side``, written on one
    side since the split, keeps that write (``_longest`` would have taken the older, longer list)."""
    net = _split_over_a_list(resolver)
    for name, node in net.nodes.items():
        assert net.contents(name) == {"shared": merged, "one-side": [5]}, name
        assert type(net.contents(name)["shared"]) is list, name  # the master too: as its followers decode it
        [conflict] = node.conflicts
        assert conflict.chosen.value == merged, name
        assert node.refused == [] and node.replica.stats.resolver_errors == 0
    if resolver is _longest:  # the other is the version that lost: the later write, [3]
        assert [c.other.value for c in net.nodes["a"].conflicts] == [[3]]


def _raises(key: Any, a: Version, b: Version) -> Version:
    raise RuntimeError("a bug in the resolver")


def _not_a_version(key: Any, a: Version, b: Version) -> Any:
    return a.value


def _restamped(key: Any, a: Version, b: Version) -> Version:
    return dataclasses.replace(a, hlc=a.hlc + 1)


def _outside_the_model(key: Any, a: Version, b: Version) -> Version:
    return dataclasses.replace(a, value=[decimal.Decimal("1.5")])


def _float_stamp(key: Any, a: Version, b: Version) -> Version:
    return dataclasses.replace(a, hlc=float(a.hlc))


def _no_finite_expiry(key: Any, a: Version, b: Version) -> Version:
    return dataclasses.replace(a, expiry=float("nan"))


def _changes_then_raises(key: Any, a: Version, b: Version) -> Version:
    a.value.append(99)  # (a copy: what the state holds is unchanged)
    raise ValueError("changed its mind")


@pytest.mark.parametrize(("resolver", "why"), [
    (_raises, "the resolver raised RuntimeError: a bug in the resolver"),
    (_not_a_version, "not a Version"),
    (_restamped, "neither of the two it was given"),
    (_outside_the_model, "a value no replica can hold"),
    (_float_stamp, "neither of the two it was given"),
    (_no_finite_expiry, "malformed version"),
    (_changes_then_raises, "the resolver raised ValueError: changed its mind"),
])
def test_a_resolver_that_fails_leaves_the_key_to_last_writer_wins_and_is_reported(resolver: Any, why: str) -> None:
    """The merge goes on (one master, every replica equal); the key the resolver failed on gets the
    default's choice; the claimant reports why (ResolverRefused, logged by the store) and counts it."""
    net = _split_over_a_list(resolver)
    for name in net.nodes:
        assert net.contents(name) == {"shared": [3], "one-side": [5]}, name
    claimant = net.nodes["c"]
    assert len(claimant.refused) == 1 and "'shared'" in claimant.refused[0] and why in claimant.refused[0], \
        claimant.refused
    assert claimant.replica.stats.resolver_errors == 1
    assert [(c.chosen.value, c.other.value) for c in claimant.conflicts] == [([3], [1, 2])]
    assert all(not net.nodes[n].refused for n in ("a", "b", "d"))  # only the claimant runs the resolver


def test_split_both_masters_stay_tagged_then_one_untags() -> None:
    """While both sides' masters still hold the tag after the heal, each claim supersedes the
    other; once the election settles the data is merged and nothing is lost."""
    names = ["a", "b", "c"]
    net = SimNet(names, seed=8)
    load = Load(net, names)
    net.tag("a")
    load.run(0.5)
    net.partition({"a", "b"}, {"c"})
    load.run(1.5)
    net.tag("c")
    load.run(1.0)
    net.heal()
    load.run(1.0)
    net.untag("c")
    load.run(0.5)
    settle(net, 4.0)
    assert net.masters() == ["a"]
    load.check(names)


def test_repeated_write_is_answered_again_not_applied_again() -> None:
    net = SimNet(["a", "b"], seed=9)
    net.tag("a")
    net.run(0.5)
    n = net.write("b", Increment("counter", 5))
    net.run(0.5)
    assert net.nodes["b"].done == {n: None}
    # the same write again (its answer "lost"): the master recognises it
    epoch = list(net.nodes["a"].replica.epoch)
    net.nodes["a"].replica.handle(["write", "b.0", n, "b", Increment("counter", 5).to_wire(), epoch], net.now)
    net._flush("a")
    net.run(0.5)
    assert net.contents("a")["counter"] == net.contents("b")["counter"] == 5


def test_put_unique_and_errors_are_answered_to_the_writer() -> None:
    net = SimNet(["a", "b"], seed=10)
    net.tag("a")
    net.run(0.5)
    first = net.write("b", PutUnique("u", 1, None, "", 0))
    second = net.write("b", PutUnique("u", 2, None, "", 0))
    net.write("b", Put("text", "x"))
    bad = net.write("b", Increment("text", 1))
    net.run(0.5)
    done = net.nodes["b"].done
    assert done[first] is True and done[second] is False
    assert isinstance(net.nodes["b"].failed[bad], TypeClash)
    assert net.contents("b")["u"] == 1


@pytest.mark.parametrize("writer", ["a", "b"])
def test_every_answer_of_a_round_larger_than_the_states_memory_reaches_its_writer(writer: str) -> None:
    """The state remembers each writer's last RESULTS_KEPT answers (for repeats). 200 put_uniques and
    100 failing increments placed together are applied before any is durable: each write still gets
    its own answer, not None (which put_unique read as "not inserted" though it inserted)."""
    net = SimNet(["a", "b"], seed=13)
    net.tag("a")
    net.run(0.5)
    net.write("a", Put("text", "x"))
    net.run(0.5)
    replica = net.nodes[writer].replica
    fresh = [replica.write(PutUnique(f"u{i}", i, None, "", 0), net.now) for i in range(200)]
    taken = [replica.write(PutUnique(f"u{i}", -i, None, "", 0), net.now) for i in range(50)]
    bad = [replica.write(Increment("text", 1), net.now) for _ in range(100)]
    assert len(fresh) + len(taken) + len(bad) > 4 * RESULTS_KEPT
    net._flush(writer)
    net.run(1.0)
    node = net.nodes[writer]
    assert [node.done.get(n) for n in fresh] == [True] * 200
    assert [node.done.get(n) for n in taken] == [False] * 50
    assert all(isinstance(node.failed.get(n), TypeClash) for n in bad)
    assert net.contents("a") == net.contents("b")
    assert not net.nodes["a"].replica._unanswered  # every kept answer was sent, and dropped


def test_a_master_answers_each_of_many_writers_once_and_then_forgets_them() -> None:
    """300 writers without a replica (Spark tasks, say), two writes each: each writer gets one answer
    up to its last write, and the master's list of writers to answer is empty again (an ack looks
    only at the writers it may answer, not at every writer the master has heard)."""
    net, master, epoch, out = _master_a(seed=14)
    for w in range(300):
        for n in (1, 2):
            master.handle(["write", f"job-{w}", n, "e" * 32, Put(f"k{w}", n).to_wire(), epoch], net.now)
    net._flush("a")
    net.run(0.5)
    answers = [m for m in out if m[0] == "wack"]
    assert sorted((m[2], m[3]) for m in answers) == sorted((f"job-{w}", 2) for w in range(300))
    assert not master._unacked
    assert net.contents("b") == {f"k{w}": 2 for w in range(300)}
    sent = len(out)
    master.handle(["write", "job-7", 2, "e" * 32, Put("k7", 2).to_wire(), epoch], net.now)  # a repeat
    net._flush("a")
    net.run(0.5)
    assert [(m[2], m[3]) for m in out[sent:] if m[0] == "wack"] == [("job-7", 2)]  # answered again
    assert not master._unacked


def test_durability_one_waits_for_another_replica() -> None:
    net = SimNet(["a", "b"], seed=11, latency=(0.05, 0.05))
    net.tag("a")
    net.run(1.0)
    n = net.write("a", Put("k", 1))
    net.run(0.06)
    assert n not in net.nodes["a"].done  # applied at a, not yet confirmed by b
    net.run(0.1)
    assert n in net.nodes["a"].done


def test_a_lost_ack_is_made_up_for_by_the_next_heartbeat() -> None:
    """A follower's heartbeat says where it is, after it committed that: where the master's history
    agrees, it counts as the ack a broker dropped. Before, the write waited for its timeout and
    failed with NoMaster (outcome unknown) though durable."""
    net = SimNet(["a", "b"], seed=11)
    net.tag("a")
    net.run(1.0)
    b = net.nodes["b"].replica
    send = b.to_send
    b.to_send = lambda: [m for m in send() if m[0] != "ack"]  # type: ignore[method-assign]  # its acks are lost
    n = net.write("a", Put("k", 1))
    net.run(0.1)
    assert n not in net.nodes["a"].done
    net.run(net.config.heartbeat + 0.05)
    assert net.nodes["a"].done == {n: None} and not net.nodes["a"].failed


@pytest.mark.parametrize("agrees", [True, False])
def test_a_heartbeat_counts_as_an_ack_only_where_the_histories_agree(agrees: bool) -> None:
    """A follower that holds other records at a seq (a deposed master's, say) reports a position of
    another epoch there: the master does not count it as an ack (the ack gate's case, docs § 5)."""
    net = SimNet(["a", "b"], seed=12)
    net.tag("a")
    net.run(1.0)
    a, b = net.nodes["a"].replica, net.nodes["b"].replica
    b.to_send = lambda: []  # type: ignore[method-assign]  # b says nothing of its own
    n = net.write("a", Put("k", 1))
    net.run(0.1)
    epoch = a.epoch
    assert epoch is not None and a.state.last_seq == 1 and n not in net.nodes["a"].done
    at = list(epoch) if agrees else [0, "z.0"]  # the epoch of b's record at seq 1
    a.handle(["hb", b.id, list(epoch), "follower", [1, at], a.id], net.now, sender=b.id.partition(".")[0])
    net._flush("a")
    assert a._members[b.id].acked == (1 if agrees else 0)
    assert (n in net.nodes["a"].done) is agrees


def test_durability_master_answers_at_once() -> None:
    net = SimNet(["a", "b"], seed=12, latency=(0.05, 0.05), durability="master")
    net.tag("a")
    net.run(1.0)
    n = net.write("a", Put("k", 1))
    assert n in net.nodes["a"].done


def test_expiry_is_enforced_by_the_master_and_replicated() -> None:
    net = SimNet(["a", "b"], seed=13)
    net.tag("a")
    net.run(0.5)
    net.write("b", Put("short", 1, expiry=1.0))
    net.run(0.5)
    assert net.contents("b") == {"short": 1}
    net.run(1.5)
    assert net.contents("a") == net.contents("b") == {}


def test_late_node_catches_up_and_restarted_sqlite_node_resumes(tmp_path: Any) -> None:
    with SimNet(["a", "b"], seed=14, paths={"b": tmp_path / "b.db"}) as net:
        net.tag("a")
        load = Load(net, ["a"])
        load.run(0.5)
        settle(net, 1.0)
        net.kill("b")
        net.nodes["b"].replica.state.close()
        load.run(0.5)
        net.add("c")
        net.add("b", tmp_path / "b.db")  # restarted: continues from its file, then catches up
        assert net.nodes["b"].replica.state.last_seq > 0
        load.run(0.5)
        settle(net)
        load.check(["a", "b", "c"])


def test_malformed_messages_raise_decode_errors_and_change_nothing() -> None:
    r = Replica("s", "x.0", VersionedState(), 0.0, clock=Clock(wall=lambda: 1.0))
    for bad in [None, [], ["nope"], ["log", "notanepoch", []], ["log", [1, "m.0"], [["x"]]],
                ["claim"], ["hb", "n", [1], "master", [0, None], None], ["snap", [1, "m.0"], "x.0", {}, "m.0"]]:
        with pytest.raises(StoreDecodeError):
            r.handle(bad, 1.0)
    assert r.state.last_seq == 0 and r.epoch is None


def test_fork_seq_finds_the_common_history() -> None:
    e1, e2, e3 = (1, "a"), (2, "b"), (2, "c")
    assert fork_seq([(e1, 1)], 10, [(e1, 1)], 7) == 7
    assert fork_seq([(e1, 1), (e2, 11)], 20, [(e1, 1), (e3, 9)], 15) == 8
    assert fork_seq([(e1, 1), (e2, 11)], 20, [(e1, 1)], 15) == 10


def test_durability_one_on_a_lone_master_fails_clearly_and_master_mode_works() -> None:
    net = SimNet(["a"], seed=15, config=ReplicaConfig(write_timeout=2.0))
    net.tag("a")
    n = net.write("a", Put("k", 1))
    net.run(3.0)
    error = net.nodes["a"].failed[n]
    assert isinstance(error, NoMaster) and "durability='master'" in str(error)
    alone = SimNet(["a"], seed=15, durability="master")
    alone.tag("a")
    alone.run(1.5)
    m = alone.write("a", Put("k", 1))
    assert alone.nodes["a"].done == {m: None}


def test_a_write_sent_to_an_earlier_mastership_is_ignored_by_the_next() -> None:
    """A write that arrives late (queued across a split, say) at a master of another epoch is not
    applied: its writer re-sends it to the master it knows, so it is applied once, where it belongs."""
    net = SimNet(["a", "b"], seed=16)
    net.tag("a")
    net.run(0.5)
    old_epoch = list(net.nodes["a"].replica.epoch)
    net.untag("a")
    net.tag("b")
    net.run(0.5)
    b = net.nodes["b"].replica
    b.handle(["write", "x.0", 1, "x", Put("late", 1).to_wire(), old_epoch], net.now)
    assert not b.state.exists("late")
    b.handle(["write", "x.0", 1, "x", Put("late", 1).to_wire(), list(b.epoch)], net.now)
    assert b.state.get("late") == 1


def test_the_writer_table_is_bounded_and_forgets_the_least_recent(monkeypatch: Any) -> None:
    from broker_mqtt.store import versioned
    from broker_mqtt.store.versioned import Record

    monkeypatch.setattr(versioned, "WRITERS_KEPT", 20)
    state = VersionedState()
    for i in range(1, 31):
        state.apply(Record(i, (1, "m"), i, "o", f"w{i}", 1, ("put", f"k{i}", i, None)))
    assert len(state.applied) <= 21
    assert "w30" in state.applied and "w1" not in state.applied
    assert state.applied_n("w1") == 0 and state.applied_n("w30") == 1


def test_a_conflict_merged_again_is_not_reported_again() -> None:
    # A second claimant that had not seen the first merge merges the same histories again (the
    # live split test saw it once under load): the same pairs of versions are not news.
    from broker_mqtt.store.replication import ConflictsFound
    from broker_mqtt.store.versioned import Conflict, Version

    net = SimNet(["a"], seed=1)
    replica = net.nodes["a"].replica
    chosen, other = Version("cd", 20, "c", 5, False, None), Version("ab", 10, "a", 4, False, None)
    gone = Version(None, 21, "c", 6, True, None)
    replica._report_conflicts((3, "x"), [Conflict("shared", chosen, other)])
    replica._report_conflicts((5, "y"), [Conflict("shared", chosen, other), Conflict("p", gone, other)])
    replica._report_conflicts((6, "z"), [Conflict("shared", other, chosen)])  # the same pair, either way
    found = [e for e in replica.events() if isinstance(e, ConflictsFound)]
    assert [[c.key for c in e.conflicts] for e in found] == [["shared"], ["p"]]
    assert [e.epoch for e in found] == [(3, "x"), (5, "y")]


def test_writers_without_a_replica_are_answered_at_their_endpoint_and_replicas_on_the_log_topic() -> None:
    from broker_mqtt.store.routes import answers_topic, master_topic, replication_topic, routes
    from broker_mqtt.store.writer_core import WriterCore

    net = SimNet(["a", "b"], seed=11)
    net.tag("a")
    net.run(0.5)
    master = net.nodes["a"].replica
    endpoint = "0123456789abcdef0123456789abcdef"
    pure = WriterCore("spark-job/p1", endpoint, net.now)
    pure.set_master(master.epoch, master.id, net.now)
    pure.write(Put("k", 1), net.now)
    out = record_sends(master)  # what the master sends, as the net delivers it
    for msg in pure.to_send():
        master.handle(msg, net.now)
    n = net.write("b", Put("j", 2))  # a replica's own write
    net.run(0.5)
    wack = next(m for m in out if m[0] == "wack" and m[2] == "spark-job/p1")
    assert wack[5] == endpoint
    assert routes("s", wack) == [(answers_topic("s"), uuid.UUID(hex=endpoint))]
    pure.handle(wack, net.now)
    assert pure.answers() == [(1, None)]
    net.run(0.5)
    assert net.nodes["b"].done == {n: None}  # the replica's answer: on the log topic, as before
    replica_wack = next(m for m in out if m[0] == "wack" and m[2] == "b.0")
    assert replica_wack[5] == "" and routes("s", replica_wack) == [(replication_topic("s"), None)]  # no endpoint
    hb = ["hb", "a.0", list(master.epoch), "master", [1, list(master.epoch)], "a.0"]
    assert routes("s", hb) == [(replication_topic("s"), None), (master_topic("s"), None)]
    assert routes("s", ["hb", "b.0", list(master.epoch), "follower", [1, None], "a.0"]) == [(replication_topic("s"), None)]
    assert routes("s", ["wack", [1, "a"], "w", 1, [], "not hex"]) == [(replication_topic("s"), None)]


@pytest.mark.parametrize("persistent", [False, True])
def test_forget_drops_old_tombstones_only_and_persists(tmp_path: Any, persistent: bool) -> None:
    path = tmp_path / "s.db" if persistent else None
    with contextlib.closing(VersionedState() if path is None else open_state(path)) as state:
        seq = 0

        def apply(op: tuple[Any, ...], hlc: int) -> list[Any]:
            nonlocal seq
            seq += 1
            return state.apply(Record(seq, (1, "m"), hlc, "o", "w", seq, op))

        apply(("many", [("put", i, f"v{i}", None) for i in range(5)]), 10)
        apply(("erase", 0), 20)
        apply(("erase", 1), 30)
        apply(("erase", 3), 40)
        apply(("put", 1, "again", None), 50)  # 1 lives again: no longer a tombstone
        assert state.tombstones == 2
        assert state.old_tombstones(before_hlc=35, limit=10) == [0]
        assert state.old_tombstones(before_hlc=100, limit=10) == [0, 3]
        assert state.old_tombstones(before_hlc=100, limit=1) == [0]
        changes = apply(("many", [("forget", 0), ("forget", 1), ("forget", 2), ("forget", 99)]), 60)
        assert changes == []  # nothing visible changed; live 1 and 2 are kept, unknown 99 is nothing
        assert state.version(0) is None and state.version(3) is not None and state.version(3).deleted
        assert state.get(1) == "again"
        assert state.version(2) is not None and state.version(2).value == "v2"
        assert state.tombstones == 1 and state.old_tombstones(100, 10) == [3]
        state.commit()
        if path is not None:
            state.close()
            with contextlib.closing(open_state(path)) as again:
                assert again.version(0) is None and again.version(3) is not None and again.version(3).deleted
                assert again.tombstones == 1 and again.old_tombstones(100, 10) == [3]
                assert again.version(1).value == "again"


def test_a_follower_that_lost_log_records_catches_up_without_another_write() -> None:
    net = SimNet(["a", "b", "c"], seed=11)
    net.tag("a")
    settle(net, 1.0)
    net.partition({"a", "b"}, {"c"})  # c misses the log records, not the master
    for i in range(30):
        net.write("a", Put(f"k{i}", i))
    net.run(0.3)
    net.heal()
    settle(net)  # no write after the heal: the master's heartbeats show c what it lacks
    c = net.nodes["c"].replica
    assert c.state.last_seq == net.nodes["a"].replica.state.last_seq == 30
    assert net.contents("c") == net.contents("a") and not c.stale



def test_a_replica_joining_while_the_master_writes_is_not_told_it_lost_records() -> None:
    """A joiner's first message from the master is a log record: it catches up by tail, and the
    master's first heartbeat after that (which counts records still on their way) is no sign of loss."""
    master = Replica("s", "m", VersionedState(), 0.0, durability="master", clock=Clock(time.time))
    master.tagged(0.0)
    t = 0.0
    for _ in range(10):
        t += 0.3
        master.tick(t, t)
        master.to_send()
    assert master.is_master
    joiner = Replica("s", "j", VersionedState(), t, clock=Clock(time.time))
    reasons: list[str] = []
    k = 0
    for _ in range(20):  # writes in every step: each step's first message is the log, then a heartbeat
        t += 0.05
        for _ in range(5):
            master.write(Put(f"k{k}", k), t)
            k += 1
        master.tick(t, t)
        for msg in master.to_send():
            joiner.handle(msg, t)
        for msg in joiner.to_send():
            master.handle(msg, t)
        for msg in master.to_send():
            joiner.handle(msg, t)
        reasons += [e.reason for e in joiner.events() if isinstance(e, StaleChanged) and e.stale]
    assert not [r for r in reasons if "lost" in r], reasons
    assert joiner.state.last_seq == master.state.last_seq and not joiner.stale


@pytest.mark.parametrize(("batches", "how"), [(5, "tail"), (20, "schunk")])
def test_log_keep_counts_ops_not_records(batches: int, how: str) -> None:
    """With ``log_keep=100``, 5 publishes of 10 messages (11 ops each: the records and the counter)
    still come as a tail; 20 (220 ops, in 20 records) are beyond what the log keeps, and the lagging
    replica gets a snapshot."""
    net = SimNet(["a", "b", "c"], seed=12, config=ReplicaConfig(log_keep=100))
    net.tag("a")
    settle(net, 1.0)
    out = record_sends(net.nodes["a"].replica)
    net.partition({"a", "b"}, {"c"})
    for i in range(batches):
        net.write("a", Publish([[i, j] for j in range(10)]))
    net.run(0.3)
    net.heal()
    net.write("a", Put("after", 1))  # c sees the gap before this record and fetches
    settle(net)
    assert {m[0] for m in out if m[0] in ("tail", "snap", "schunk")} == {how}
    assert net.contents("c") == net.contents("a")
    assert len([k for k in net.contents("c") if isinstance(k, int)]) == 10 * batches
    log = net.nodes["a"].replica._log
    assert log.ops <= 100 and (len(log) == batches + 1 if how == "tail" else len(log) < batches)


def test_record_log_keeps_ops_up_to_its_bound_and_always_the_newest_record() -> None:
    def rec(seq: int, ops: int) -> Record:
        op = ("many", [("put", f"k{seq}.{i}", i, None) for i in range(ops)]) if ops > 1 else ("put", seq, 1, None)
        return Record(seq, (1, "m"), seq, "o", "w", seq, op)

    log = RecordLog(10)
    for seq, ops in [(1, 4), (2, 4), (3, 1)]:
        log.append(rec(seq, ops))
    assert (log.ops, [r.seq for r in log]) == (9, [1, 2, 3])
    log.append(rec(4, 3))  # 12 ops: the oldest record goes
    assert (log.ops, [r.seq for r in log]) == (8, [2, 3, 4])
    assert log.covers(1, 4) and not log.covers(0, 4) and not log.covers(1, 5)
    assert [[r.seq for r in c] for c in log.after(1, chunk_ops=4)] == [[2], [3, 4]]
    assert [[r.seq for r in c] for c in log.after(4)] == [[]]  # nothing after: one empty tail
    log.append(rec(5, 25))  # larger than the bound alone: kept, alone
    assert (log.ops, [r.seq for r in log]) == (25, [5])
    assert [[r.seq for r in c] for c in log.after(4, chunk_ops=4)] == [[5]]
    log.clear()
    assert (log.ops, len(log), log.covers(0, 0)) == (0, 0, False)
    assert op_count(("many", [])) == 1  # every record counts: an empty batch cannot grow the log unbounded


def test_a_claim_right_after_a_pause_waits_to_hear_the_members_again() -> None:
    """A replica paused (SIGSTOP) for longer than ``member_timeout`` has heard nobody lately, so by
    its clock every member looks dead. If it is tagged on waking, before it has read its socket (its
    election timer ran first), its claim must still wait for the members' promises: claiming on its
    own stale history would make it master behind the replicas that hold acknowledged writes, and
    the histories would then be merged (found by bench/chaos.py on ejabberd: queue messages
    accepted twice after a paused follower's takeover)."""
    net = SimNet(["a", "b", "c"], seed=11)
    net.tag("a")
    load = Load(net, ["a", "b", "c"])
    load.run(0.5)
    net.pause("b")
    load.run(3.0)  # a and c go on; b hears nothing
    node = net.nodes["b"]

    def wakes() -> None:  # its overdue election runs before it reads its socket, and its writer goes on
        net.tag("b")
        net.untag("a")
        load.step()

    net.resume("b", first=wakes)
    load.run(0.5)
    settle(net)
    assert net.masters() == ["b"]
    assert node.replica.stats.merges == 0 and node.conflicts == []
    load.check(["a", "b", "c"])


def test_a_follower_holding_the_deposed_masters_unacknowledged_tail_is_not_merged() -> None:
    """A broker crash loses a follower's acknowledgements on their way to the master: the follower
    holds records the master never counted as durable, so never acknowledged to a writer. The next
    master claims while that follower is away (paused), from the deposed master's promise, which
    leaves that tail out. When the follower is back, its tail is a deposed master's unacknowledged
    one, to be dropped (the follower resyncs; the writers re-send), not a diverged history to merge:
    a merge of a queue's store hands message ids out twice (found by bench/chaos.py)."""
    net = SimNet(["a", "b", "c"], seed=12)
    net.tag("a")
    load = Load(net, ["a", "c"])
    load.run(0.5)
    settle(net, 1.0)
    linked = net._linked
    # a's records reach b only, and b's acknowledgements never reach a
    net._linked = lambda s, d: linked(s, d) and (s, d) not in {("b", "a"), ("a", "c")}  # type: ignore[method-assign]
    load.run(0.3)
    assert net.nodes["b"].replica.state.last_seq > net.nodes["c"].replica.state.last_seq
    net.untag("a")  # its tag ran out while the broker was down: it steps down, its tail unacknowledged
    net.pause("b")
    net._linked = linked  # type: ignore[method-assign]
    net.run(2.0)  # b is silent longer than member_timeout
    net.tag("c")
    load.run(0.5)
    node = net.nodes["b"]

    def wakes() -> None:  # its overdue heartbeat goes out before it reads its socket
        node.replica.tick(net.now, 1_000_000 + net.now)
        net._flush("b")

    net.resume("b", first=wakes)
    load.run(0.5)
    settle(net)
    assert net.masters() == ["c"]
    assert all(n.replica.stats.merges == 0 for n in net.nodes.values()), [n.replica.stats for n in net.nodes.values()]
    assert all(not n.conflicts for n in net.nodes.values())
    load.check(["a", "b", "c"])


@pytest.mark.anyio
async def test_a_put_unique_whose_answer_was_forgotten_raises_rather_than_answering_false() -> None:
    from broker_mqtt.store.elected import ElectedStore

    class Answering:  # what ElectedStore.put_unique needs: a name, and write()'s answer
        name = "s"

        def __init__(self, answer: Any) -> None:
            self.answer = answer

        async def write(self, command: Any) -> Any:
            assert isinstance(command, PutUnique)
            return self.answer

    assert await ElectedStore.put_unique(Answering(True), "k", 1) is True  # type: ignore[arg-type]
    assert await ElectedStore.put_unique(Answering(False), "k", 1) is False  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="forgotten"):  # a repeat answered past RESULTS_KEPT
        await ElectedStore.put_unique(Answering(None), "k", 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("writer", ["a", "b"])
def test_each_log_message_is_answered_once_acknowledged_not_when_the_last_is(writer: str) -> None:
    """150 writes of one writer, applied together, leave the master in log messages of LOG_GROUP
    writes. An ack of the first message answers that message's writes at once, while the rest wait
    for theirs: rounds in flight are answered one by one, so the writer's next writes overlap the
    followers' work instead of waiting for the last write of every round before."""
    net = SimNet(["a", "b"], seed=15)
    net.tag("a")
    net.run(0.5)
    master, follower = net.nodes["a"].replica, net.nodes["b"].replica
    node = net.nodes[writer]
    node.replica.to_send()
    ns = [node.replica.write(Put(f"k{i}", i), net.now) for i in range(150)]
    if writer == "b":  # a follower's writes travel to the master first
        for msg in follower.to_send():
            if msg[0] in ("write", "writes"):
                master.handle(msg, net.now)
    logs = [m for m in master.to_send() if m[0] == "log"]
    applied = [sum(len(r[6][1]) if r[6][0] == "many" else 1 for r in m[2]) for m in logs]
    assert applied == [LOG_GROUP, LOG_GROUP, 150 - 2 * LOG_GROUP]
    assert [len(m[2]) for m in logs] == [1, 1, 1]  # (small puts placed together: one record, put_batch)

    def ack_through(log: list[Any]) -> list[int]:
        follower.handle(log, net.now)
        acks = [m for m in follower.to_send() if m[0] == "ack"]
        assert len(acks) == 1
        master.handle(acks[0], net.now)
        for msg in master.to_send():  # a follower's answers: a wack on the log topic
            if msg[0] == "wack":
                follower.handle(msg, net.now)
        return sorted(e.n for e in node.replica.events() if isinstance(e, WriteDone))

    assert ack_through(logs[0]) == ns[:LOG_GROUP]
    assert ack_through(logs[1]) == ns[LOG_GROUP:2 * LOG_GROUP]
    assert ack_through(logs[2]) == ns[2 * LOG_GROUP:]
    assert not master._unacked and not master._rounds


def _master_a(seed: int, config: ReplicaConfig | None = None) -> tuple[SimNet, Replica, list[Any], list[list[Any]]]:
    """Nodes a and b, a master: the network, a's replica, its epoch (as on the wire) and, from now on,
    a copy of everything it sends."""
    net = SimNet(["a", "b"], seed=seed, config=config)
    net.tag("a")
    net.run(0.5)
    master = net.nodes["a"].replica
    return net, master, list(master.epoch), record_sends(master)


def _as_writer_reads(wacks: list[list[Any]], ns: list[int]) -> dict[int, Any]:
    """What a writer with writes ``ns`` pending reads from ``wacks`` in order (as WriterCore does):
    each wack answers every pending write after its ``after`` up to its ``upto``, with its result or None."""
    pending, got = sorted(ns), {}
    for m in wacks:
        upto, results, after = m[3], dict(m[4]), (m[6] if len(m) > 6 else 0)
        for n in [n for n in pending if after < n <= upto]:
            pending.remove(n)
            got[n] = results.get(n)
    assert not pending, f"never answered: {pending[:5]}"
    return got


@pytest.mark.parametrize("together", [False, True])
@pytest.mark.parametrize("logged", [False, True], ids=["log-dropped-them", "log-holds-them"])
def test_a_repeat_whose_answer_is_forgotten_is_answered_answer_forgotten_not_none(
        together: bool, logged: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer without a replica places 10 puts, 5 increments, 200 put_uniques and 100 puts; all
    are answered. Its answers are "lost" and it sends them all again (one message each, or
    together): the last RESULTS_KEPT put_uniques get their kept answer (True); the older put_uniques
    and the increments get the answer the log's record of them holds (True, None) while the log
    holds them; once it dropped them (a log of 50 ops), AnswerForgotten (applied, answer unknown:
    None, or a TypeClash for an increment, nobody knows any more), not None (which put_unique read
    as "not inserted", and which reads as success); the puts None, as before. Read as the writer
    reads them: a wack answers every write up to its ``upto``, so none may go out before the
    answers up to there are known."""
    net, master, epoch, out = _master_a(seed=16, config=None if logged else ReplicaConfig(log_keep=50))
    commands: list[Any] = [Put(f"p{i}", i) for i in range(10)] + [Increment(f"c{i}", 1) for i in range(5)]
    commands += [PutUnique(f"u{i}", i, None, "", 0) for i in range(200)] + [Put(f"q{i}", i) for i in range(100)]
    ns = list(range(1, len(commands) + 1))

    def place_all(grouped: bool) -> dict[int, Any]:
        sent = len(out)
        if grouped:
            for i in range(0, len(commands), 256):
                master.handle(["writes", "job", "e" * 32, [[n, c.to_wire()] for n, c in
                                                           enumerate(commands[i:i + 256], i + 1)], epoch], net.now)
        else:
            for n, command in enumerate(commands, 1):
                master.handle(["write", "job", n, "e" * 32, command.to_wire(), epoch], net.now)
        net._flush("a")
        net.run(0.5)
        return _as_writer_reads([m for m in out[sent:] if m[0] == "wack" and m[2] == "job"], ns)

    first = place_all(False)
    assert [first[n] for n in range(16, 216)] == [True] * 200
    assert all(first[n] is None for n in [*range(1, 16), *range(216, 316)])
    scans = _count_log_scans(monkeypatch, master)
    again = place_all(together)
    assert [again[n] for n in range(216 - RESULTS_KEPT, 216)] == [True] * RESULTS_KEPT
    if logged:
        assert [again[n] for n in range(16, 216 - RESULTS_KEPT)] == [True] * (200 - RESULTS_KEPT)
        assert [again[n] for n in range(11, 16)] == [None] * 5
        assert len(scans) == 1  # one scan of the log for the whole burst of repeats
    else:
        for n in [*range(11, 16), *range(16, 216 - RESULTS_KEPT)]:
            assert isinstance(again[n], list) and isinstance(error_from_wire(again[n][1:]), AnswerForgotten), \
                (n, again[n])
    assert all(again[n] is None for n in [*range(1, 11), *range(216, 316)])
    assert not master._repeat_answers


def _count_log_scans(monkeypatch: pytest.MonkeyPatch, replica: Replica) -> list[tuple[int, int]]:
    """From now on, the ``(first, last)`` of every scan of ``replica``'s log for a writer's answers."""
    scans: list[tuple[int, int]] = []
    results_of = RecordLog.results_of

    def counted(log: RecordLog, writer: str, first: int, last: int) -> dict[int, Any]:
        if log is replica._log:
            scans.append((first, last))
        return results_of(log, writer, first, last)

    monkeypatch.setattr(RecordLog, "results_of", counted)
    return scans


def test_a_slow_write_sent_again_keeps_its_answer() -> None:
    """A put, an increment and 100 put_uniques wait for a paused replica (durability one, no other
    live replica), and their writer sends them again meanwhile: once durable, the put and the
    increment are answered None (the put has no answer to forget; the increment's, None, is known to
    the master that applied it and has not answered it) and each put_unique True, not AnswerForgotten."""
    net, master, epoch, out = _master_a(seed=17)
    net.pause("b")
    commands = [Put("p", 1), Increment("c", 1)] + [PutUnique(f"u{i}", i, None, "", 0) for i in range(100)]
    for _ in range(2):  # the second time: repeats (the writer's retry), the first not durable yet
        for n, command in enumerate(commands, 1):
            master.handle(["write", "job", n, "e" * 32, command.to_wire(), epoch], net.now)
        net._flush("a")
        net.run(1.0)
    assert not [m for m in out if m[0] == "wack"]
    net.resume("b")
    net.run(2.0)
    answers = _as_writer_reads([m for m in out if m[0] == "wack" and m[2] == "job"], list(range(1, 103)))
    assert answers == {1: None, 2: None, **{n: True for n in range(3, 103)}}


def _job_writes(net: SimNet, name: str, wire: list[list[Any]], seconds: float = 0.5) -> None:
    """Writes ``wire`` ([[n, command], ...]) of the writer "job" (no replica) to master ``name``."""
    replica = net.nodes[name].replica
    replica.handle(["writes", "job", "e" * 32, wire, list(replica.epoch)], net.now)
    net._flush(name)
    net.run(seconds)


def _master_dies_after(wire: list[list[Any]], seed: int, config: ReplicaConfig | None = None) -> tuple[SimNet, Replica]:
    """Three nodes; master "a" applies "job"'s ``wire`` (made durable), then dies before its answers
    arrive, and "b" becomes master: the network and the new master."""
    net = SimNet(["a", "b", "c"], seed=seed, config=config)
    net.tag("a")
    net.run(0.5)
    _job_writes(net, "a", wire)
    net.kill("a")
    net.untag("a")
    net.tag("b")
    net.run(3.0)
    new = net.nodes["b"].replica
    assert new.is_master
    return net, new


@pytest.mark.parametrize("logged", [False, True], ids=["log-dropped-them", "log-holds-them"])
def test_repeats_to_a_new_master_get_the_answers_it_knows_and_no_none_for_the_rest(logged: bool) -> None:
    """200 put_uniques of a writer without a replica are applied and durable, and the master dies
    before its answers arrive. The writer sends them all again to the next master: the last
    RESULTS_KEPT are answered True (the state carried their answers), the others True too while the
    next master's log holds their records, else (a log of 50 ops) AnswerForgotten; none None."""
    commands = [PutUnique(f"u{i}", i, None, "", 0) for i in range(200)]
    wire = [[n, c.to_wire()] for n, c in enumerate(commands, 1)]
    net, new = _master_dies_after(wire, seed=18, config=None if logged else ReplicaConfig(log_keep=50))
    assert net.contents("b") == net.contents("c") == {f"u{i}": i for i in range(200)}
    out = record_sends(new)
    _job_writes(net, "b", wire)
    answers = _as_writer_reads([m for m in out if m[0] == "wack" and m[2] == "job"], list(range(1, 201)))
    assert [answers[n] for n in range(201 - RESULTS_KEPT, 201)] == [True] * RESULTS_KEPT
    if logged:
        assert [answers[n] for n in range(1, 201 - RESULTS_KEPT)] == [True] * (200 - RESULTS_KEPT)
    else:
        assert all(isinstance(error_from_wire(answers[n][1:]), AnswerForgotten) for n in range(1, 201 - RESULTS_KEPT))
    assert net.contents("b") == {f"u{i}": i for i in range(200)}  # answered, not applied again


def test_a_writer_that_carries_on_under_a_new_master_is_answered() -> None:
    """A writer without a replica wrote 100 put_uniques, answered by one master (more than the
    RESULTS_KEPT answers the state keeps). Under the next master it carries on with new writes
    only: they are answered (the next master does not wait for answers to writes it never needs)."""
    net, new = _master_dies_after([[n, PutUnique(f"u{n}", n, None, "", 0).to_wire()] for n in range(1, 101)], seed=19)
    out = record_sends(new)
    _job_writes(net, "b", [[101, Put("p", 1).to_wire()], [102, PutUnique("u1", 0, None, "", 0).to_wire()]])
    wacks = [m for m in out if m[0] == "wack" and m[2] == "job"]
    assert wacks and wacks[-1][3] == 102 and dict(wacks[-1][4]).get(102) is False
    assert not new._unacked


def test_a_repeat_followed_by_many_new_writes_is_answered_at_once() -> None:
    """Under a new master a writer re-sends an increment (applied by the last master, answer None)
    and goes on with 99 new put_uniques in the same message: the repeat's answer, None, known when
    it arrived, stays known after the new answers push the state's oldest kept answer past it. One
    answer for all, without waiting for the writer's next retry."""
    wire = [[n, PutUnique(f"u{n}", n, None, "", 0).to_wire()] for n in range(1, 101)] + [[101, Increment("c", 1).to_wire()]]
    net, new = _master_dies_after(wire, seed=20)
    out = record_sends(new)
    more = [[101, Increment("c", 1).to_wire()]] + [[n, PutUnique(f"u{n}", n, None, "", 0).to_wire()] for n in range(102, 201)]
    _job_writes(net, "b", more, seconds=0.3)  # less than the writer's retry interval
    answers = _as_writer_reads([m for m in out if m[0] == "wack" and m[2] == "job"], list(range(101, 201)))
    assert answers == {101: None, **{n: True for n in range(102, 201)}}
    assert net.contents("b")["c"] == 1


def test_a_writer_whose_repeats_stopped_coming_is_not_held_back_for_ever() -> None:
    """A writer's answers up to 600 reach it, but its retry (crossing them) reaches the master only in
    part: 101..356 again. The master cannot tell the answers of 357..600 any more and holds them back
    for the repeats, which never come (the writer has them). The writer's next write, 601, is still
    answered: within two retry intervals, not never."""
    net, master, epoch, out = _master_a(seed=21)
    wire = [[n, PutUnique(f"u{n}", n, None, "", 0).to_wire()] for n in range(1, 601)]
    for i in range(0, 600, 200):
        master.handle(["writes", "job", "e" * 32, wire[i:i + 200], epoch], net.now)
    net._flush("a")
    net.run(0.5)
    assert max(m[3] for m in out if m[0] == "wack" and m[2] == "job") == 600
    master.handle(["writes", "job", "e" * 32, wire[100:356], epoch], net.now)  # the part that came
    new = ["write", "job", 601, "e" * 32, Put("p", 1).to_wire(), epoch]
    master.handle(new, net.now)
    net._flush("a")
    for _ in range(4):  # the writer re-sends 601 every retry interval
        net.run(1.0)
        if max(m[3] for m in out if m[0] == "wack" and m[2] == "job") >= 601:
            break
        master.handle(new, net.now)
        net._flush("a")
    assert max(m[3] for m in out if m[0] == "wack" and m[2] == "job") == 601
    assert not master._unacked and not master._held_back
    # 357..600 were answered before: the last wack does not answer them again one by one (a writer
    # that missed them would see the gap and send them again)
    last = next(m for m in reversed(out) if m[0] == "wack" and m[2] == "job")
    assert not [n for n, r in last[4] if isinstance(r, list)], last[4][:3]


def test_a_lost_wack_leaves_its_writes_pending_and_they_are_answered_again_not_none() -> None:
    """A writer's first wack is lost (a reconnect with a clean session, a broker queue full), the
    next arrives: it answers only the writes after the lost one's (its ``after``), so the first 20
    put_uniques stay pending, go again at the retry and get their kept answer, True. Before, the
    later wack answered them None, read by put_unique as "not inserted"."""
    net = SimNet(["a", "b"], seed=19)
    net.tag("a")
    net.run(0.5)
    master = net.nodes["a"].replica
    out = record_sends(master)
    writer = WriterCore("job", "e" * 32, net.now, retry_interval=1.0)
    assert master.epoch is not None
    writer.set_master(master.epoch, master.id, net.now)

    def exchange(lose_wacks: bool) -> dict[int, Any]:
        sent = len(out)
        for msg in writer.to_send():
            master.handle(msg, net.now)
        net._flush("a")
        net.run(0.5)
        for msg in out[sent:]:
            if msg[0] == "wack" and msg[2] == "job" and not lose_wacks:
                writer.handle(msg, net.now)
        writer.tick(net.now)
        return dict(writer.answers())

    for i in range(40):
        writer.write(PutUnique(f"u{i}", i, None, "", 0), net.now)
        if i == 19:
            assert exchange(lose_wacks=True) == {}
    assert exchange(lose_wacks=False) == {n: True for n in range(21, 41)}
    assert writer.pending == 20 and writer.answers_lost == 20
    again: dict[int, Any] = {}
    for _ in range(6):  # the retry (every second) sends them again
        again |= exchange(lose_wacks=False)
        if not writer.pending:
            break
    assert again == {n: True for n in range(1, 21)}
    assert master.state.applied_n("job") == 40  # the repeats were answered, not applied
    assert net.contents("a") == {f"u{i}": i for i in range(40)}


@pytest.mark.parametrize("batch", [0.0, 0.005])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_with_messages_lost_a_put_unique_of_a_fresh_key_is_never_answered_none(seed: int, batch: float) -> None:
    """5 % of all messages lost: the followers' put_uniques of fresh keys are each answered True,
    or AnswerForgotten when the answer was lost and forgotten since; never None ("not inserted"),
    which a wack read after a lost one gave before ``after``. Each key is in the store once."""
    with SimNet(["a", "b", "c"], seed=seed, loss=0.05, batch=batch) as net:
        net.tag("a")
        net.run(0.5)
        placed: dict[str, dict[int, str]] = {"b": {}, "c": {}}
        for i in range(150):
            for w in placed:
                placed[w][net.write(w, PutUnique(f"{w}{i}", i, None, "", 0))] = f"{w}{i}"
            net.run(0.01)
        net.run(10.0)
        for w, keys in placed.items():
            node = net.nodes[w]
            assert set(node.done) | set(node.failed) == set(keys), w
            assert all(node.done[n] is True for n in node.done), (w, [n for n in node.done if node.done[n] is not True])
            assert all(isinstance(e, AnswerForgotten) for e in node.failed.values()), (w, node.failed)
        contents = net.contents("a")
        assert all(contents[k] == int(k[1:]) for keys in placed.values() for k in keys.values())


def test_a_writer_sends_again_at_once_the_writes_a_lost_wack_answered() -> None:
    """A wack that answers after write 3 while 1..3 are pending shows a lost wack: 1..3 go again
    at once (before later writes push their answers out of the state's memory), not at the next
    retry, and once (not again for each later wack while the gap lasts); 4..5 are answered, with
    None where the wack has no result."""
    writer = WriterCore("w", "e" * 32, 0.0, retry_interval=1.0)
    writer.set_master((1, "m.0"), "m.0", 0.0)
    ns = [writer.write(PutUnique(f"k{i}", i, None, "", 0), 0.0) for i in range(6)]
    assert [m[0] for m in writer.to_send()] == ["writes"]
    writer.handle(["wack", [1, "m.0"], "w", 5, [[4, True]], "", 3], 0.1)
    assert writer.answers() == [(4, True), (5, None)] and writer.answers_lost == 3
    again = writer.to_send()
    assert [[n for n, _ in m[3]] for m in again] == [[1, 2, 3]]
    assert writer.pending == 4  # 1, 2, 3 and 6
    writer.handle(["wack", [1, "m.0"], "w", 6, [], "", 5], 0.15)  # the same gap: not sent again
    assert writer.answers() == [(6, None)] and writer.to_send() == [] and writer.answers_lost == 3
    writer.handle(["wack", [1, "m.0"], "w", 3, [[1, True], [2, False]], "", 0], 0.2)
    assert writer.answers() == [(1, True), (2, False), (3, None)] and ns[-1] == 6 and writer.pending == 0


def test_a_forgotten_answer_of_a_put_erase_or_clear_is_none_at_the_writer() -> None:
    """A master that no longer holds a write's answer says AnswerForgotten (``_forget_unknown``):
    for a put it does so even while its log holds the write inside a batch of puts (the record
    carries the batch's last n only). The writer knows the command: a put, an erase or a clear has
    no answer to forget and is answered None; a put_unique (its answer matters) stays
    AnswerForgotten."""
    forgotten = ["error", *AnswerForgotten("write n was applied; its answer was forgotten").to_wire()]
    writer = WriterCore("w", "e" * 32, 0.0)
    writer.set_master((1, "m.0"), "m.0", 0.0)
    writer.write(Put("k", 1), 0.0)
    writer.write(Erase("k"), 0.0)
    writer.write(PutUnique("u", 1, None, "", 0), 0.0)
    writer.to_send()
    writer.handle(["wack", [1, "m.0"], "w", 3, [[n, forgotten] for n in (1, 2, 3)], "", 0], 0.1)
    answers = writer.answers()
    assert [(n, a) for n, a in answers[:2]] == [(1, None), (2, None)]
    assert answers[2][0] == 3 and type(answers[2][1]) is AnswerForgotten


def test_a_write_lost_with_its_master_does_not_wedge_its_writer() -> None:
    """Durability "master": master a answers b's write 2 and dies before its log record leaves (a
    loss the docs allow). The next master holds b's n at 1, and held b's later writes for ever for
    write 2, which b, holding its answer, never sends again: each failed NoMaster after
    write_timeout. b's re-sends now say it holds the answers before its first unanswered write
    (``since``): the master passes over the lost one with a noop record and counts it."""
    net = SimNet(["a", "b", "c"], seed=1, durability="master")
    net.tag("a")
    net.run(1.0)
    a, b, c = (net.nodes[x].replica for x in "abc")
    n1 = net.write("b", Put("k1", 1))
    net.run(0.5)
    assert n1 in net.nodes["b"].done
    send = a.to_send
    a.to_send = lambda: [m for m in send() if m[0] != "log"]  # type: ignore[method-assign]  # a dies with its log
    n2 = net.write("b", Put("k2", 2))
    net.run(0.2)
    assert net.nodes["b"].done.get(n2, "unanswered") is None  # answered, held by a alone
    net.kill("a")
    net.run(1.0)
    net.tag("c")
    net.run(2.0)
    n3 = net.write("b", Put("k3", 3))
    net.run(3.0)
    assert n3 in net.nodes["b"].done and not net.nodes["b"].failed
    assert c.stats.writes_lost == 1 and c.state.applied_n(b.id) == n3
    assert net.contents("b") == net.contents("c") == {"k1": 1, "k3": 3}  # write 2 lost, as allowed


def test_a_write_given_up_before_any_master_applied_it_does_not_wedge_its_writer() -> None:
    """Write 1 of b never reaches the master and fails with NoMaster after write_timeout (outcome
    unknown). The master held b's write 2 for ever for it; b's re-send of 2 says it holds the
    answers before 2, so the master passes over 1 (counted), and write 1, if a copy arrives late,
    is a repeat: never applied."""
    net = SimNet(["a", "b"], seed=3, config=ReplicaConfig(write_timeout=2.0))
    net.tag("a")
    net.run(1.0)
    a, b = net.nodes["a"].replica, net.nodes["b"].replica
    send = b.to_send
    lost: list[Any] = []

    def losing() -> list[Any]:
        out = []
        for m in send():
            (lost if m[0] == "write" and m[2] == 1 else out).append(m)
        return out

    b.to_send = losing  # type: ignore[method-assign]  # its write 1 is lost, each time it is sent
    n1 = net.write("b", Put("k1", 1))
    net.run(2.5)
    assert isinstance(net.nodes["b"].failed.get(n1), NoMaster) and lost
    b.to_send = send  # type: ignore[method-assign]
    n2 = net.write("b", Put("k2", 2))
    net.run(2.0)
    assert n2 in net.nodes["b"].done and a.stats.writes_lost == 1
    a.handle(lost[0], net.now)  # a late copy of write 1
    net._flush("a")
    net.run(1.0)
    assert net.contents("a") == net.contents("b") == {"k2": 2}


def test_a_skip_leaves_no_held_copies_behind() -> None:
    """Write 1 of w is lost; 2 and 3 arrive and are held for it; w's write 1 times out and it sends
    2 and 3 again with since 2. The master passes over 1 and applies 2 and 3, and holds nothing
    of w any more: a held copy left behind (n at or before the writer's n) would never be applied
    nor dropped, and would keep w's puts from being batched for the rest of the mastership."""
    net, master, epoch, _out = _master_a(seed=3)
    origin = "e" * 32
    for n in (2, 3):
        master.handle(["write", "w", n, origin, Put(f"k{n}", n).to_wire(), epoch], net.now)
    assert set(master._held["w"]) == {2, 3}
    master.handle(["writes", "w", origin, [[n, Put(f"k{n}", n).to_wire()] for n in (2, 3)], epoch, 2], net.now)
    net._flush("a")
    net.run(0.5)
    assert master.state.applied_n("w") == 3 and master.stats.writes_lost == 1
    assert "w" not in master._held


@pytest.mark.parametrize("origin", ["b" * 32, "c" * 32])
def test_only_a_replicas_own_endpoint_passes_over_its_writes(origin: str) -> None:
    """A replica's writer (its node id names its endpoint) is believed to hold answers (``since``)
    from its own endpoint only: another endpoint saying so for it would make the master pass over
    its writes, and take its next ones for repeats, never applied."""
    net, master, epoch, _out = _master_a(seed=3)
    writer = "b" * 32 + ".1"
    master.handle(["write", writer, 5, origin, Put("k", 5).to_wire(), epoch, 5], net.now)
    own = origin == "b" * 32
    assert master.state.applied_n(writer) == (5 if own else 0) and master.stats.writes_lost == (4 if own else 0)


def test_since_is_an_optional_trailing_element_of_write_messages() -> None:
    """A first send has no ``since`` (every master decodes it); a re-send carries it; anything
    else there is malformed."""
    from broker_mqtt.store.replica_messages import Write, Writes, decode, encode

    plain = Write("w", 3, "e" * 32, Put("k", 1).to_wire(), (1, "m.0"))
    assert encode(plain) == ["write", "w", 3, "e" * 32, ["put", "k", 1, None], [1, "m.0"]]
    again = Writes("w", "e" * 32, [(3, Put("k", 1).to_wire()), (4, Put("j", 2).to_wire())], (1, "m.0"), 3)
    for msg in (plain, again, Write("w", 3, "e" * 32, Put("k", 1).to_wire(), None, 2)):
        assert decode(encode(msg)) == msg
    for bad in (["write", "w", 3, "e" * 32, ["put", "k", 1, None], [1, "m.0"], "x"],
                ["writes", "w", "e" * 32, [], [1, "m.0"], 1, 2]):
        with pytest.raises(StoreDecodeError):
            decode(bad)


def test_a_master_keeps_its_marks_of_a_bounded_number_of_writers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer per task and batch (a Spark job) makes many writers in one mastership: the master's
    marks of those with nothing to answer are forgotten past MAX_WRITERS_MARKED, and a forgotten
    writer is still answered exactly, from the state: a repeat with its kept answer, a new write."""
    monkeypatch.setattr(replica_master, "MAX_WRITERS_MARKED", 100)
    net, master, epoch, out = _master_a(seed=20)

    def write(writer: str, n: int, command: Any) -> Any:
        sent = len(out)
        master.handle(["write", writer, n, "e" * 32, command.to_wire(), epoch], net.now)
        net._flush("a")
        net.run(0.2)
        return _as_writer_reads([m for m in out[sent:] if m[0] == "wack" and m[2] == writer], [n])[n]

    for i in range(350):
        assert write(f"task-{i}", 1, PutUnique(f"k{i}", i, None, "", 0)) is True
        marks = (master._acked_n, master._applied_from, master._sent_upto)
        assert all(len(m) <= 100 for m in marks), [len(m) for m in marks]
    assert "task-0" not in master._acked_n and not master._held
    assert write("task-0", 1, PutUnique("k0", 0, None, "", 0)) is True  # a repeat: its kept answer
    assert write("task-0", 2, PutUnique("k0", 0, None, "", 0)) is False  # a new write: applied
    assert master.state.applied_n("task-0") == 2 and net.contents("a")["k0"] == 0


def test_a_later_gap_gets_its_own_two_retry_intervals() -> None:
    """A writer lost the answers of its put_uniques 1..40 (older than the 64 the state keeps) and
    sends them again in two parts, 1.5 retry intervals apart; its next write, 201, comes after the
    second part's first half. The master holds the writer back at each unknown answer, but the
    timer of the first gap does not cut the second's short: 21..40 are answered AnswerForgotten
    when they come (the log of 50 ops no longer holds them either), not None (read as "not
    inserted") when 201 is acknowledged."""
    net, master, epoch, out = _master_a(seed=22, config=ReplicaConfig(log_keep=50))
    wire = [[n, PutUnique(f"u{n}", n, None, "", 0).to_wire()] for n in range(1, 201)]
    _job_writes(net, "a", wire)
    sent = len(out)
    _job_writes(net, "a", wire[:20], 1.5)  # 1..20 again
    _job_writes(net, "a", wire[20:30])  # 21..30 again; 31..40 are late
    master.handle(["write", "job", 201, "e" * 32, PutUnique("v", 0, None, "", 0).to_wire(), epoch], net.now)
    net._flush("a")
    net.run(0.1)
    _job_writes(net, "a", wire[30:40])
    answers = _as_writer_reads([m for m in out[sent:] if m[0] == "wack" and m[2] == "job"], list(range(1, 41)))
    forgotten = [n for n in range(1, 41) if isinstance(answers[n], list)
                 and isinstance(error_from_wire(answers[n][1:]), AnswerForgotten)]
    assert forgotten == list(range(1, 41)), answers


def test_a_replica_whose_wack_is_lost_counts_it_and_gets_every_answer() -> None:
    """A follower's writer: the first wacks of its put_uniques are lost on the log topic, the later
    ones arrive; the writes the lost ones answered are sent again and answered True, and
    ``answers_lost`` counts them."""
    net = SimNet(["a", "b"], seed=23)
    net.tag("a")
    net.run(0.5)
    ns = [net.write("b", PutUnique(f"u{i}", i, None, "", 0)) for i in range(20)]
    for _ in range(200):
        net.run(0.001)
        lost = [item for item in net._queue if item[3] == "b" and item[4][0] == "wack"]
        if lost:
            break
    assert lost, "the master answered nothing"
    net._queue = [item for item in net._queue if item not in lost]
    heapq.heapify(net._queue)
    ns += [net.write("b", PutUnique(f"v{i}", i, None, "", 0)) for i in range(20)]
    net.run(3.0)
    b = net.nodes["b"]
    assert b.done == {n: True for n in ns} and not b.failed
    covered = {n for item in lost for n in range(item[4][6] + 1, item[4][3] + 1)}
    assert b.replica.stats.answers_lost == len(covered) >= 1


def test_a_hold_back_that_runs_out_answers_from_the_log_or_answer_forgotten_not_none() -> None:
    """A new master (after a failover) holds writes 1..300 of a writer: 40 puts, then 260
    put_uniques, none answered by it. Only 1..20 come again; the hold-back runs out (two retry
    intervals): the master answers what it still cannot tell from its log's records (the puts'
    None, the put_uniques' True) where the log still holds them, else AnswerForgotten; never a
    put_unique None."""
    net, master, epoch, out = _master_a(seed=24, config=ReplicaConfig(log_keep=200))
    commands: list[Any] = [Put(f"p{i}", i) for i in range(40)] + [PutUnique(f"u{i}", i, None, "", 0)
                                                                  for i in range(260)]
    wire = [[n, c.to_wire()] for n, c in enumerate(commands, 1)]
    _job_writes(net, "a", wire)
    master._sent_upto.pop("job")  # as a new master that applied none of them: it answered none
    master._applied_from.pop("job")
    sent = len(out)
    master.handle(["writes", "job", "e" * 32, wire[:20], epoch], net.now)  # 21.. never come again
    net._flush("a")
    for _ in range(4):
        net.run(1.0)
        master.handle(["write", "job", 301, "e" * 32, Put("z", 0).to_wire(), epoch], net.now)
        net._flush("a")
    answers = _as_writer_reads([m for m in out[sent:] if m[0] == "wack" and m[2] == "job"], list(range(1, 302)))
    logged = {r.n for r in master._log if r.writer == "job"}
    assert len(logged) < 300  # the log no longer holds the first writes
    for n in range(21, 301):
        if n > 300 - RESULTS_KEPT:
            assert answers[n] is True, n  # the state keeps them
        elif n in logged:
            assert answers[n] == (None if n <= 40 else True), n
        else:
            assert isinstance(error_from_wire(answers[n][1:]), AnswerForgotten), (n, answers[n])
    assert answers[301] is None


def test_writes_whose_answers_and_repeats_were_lost_are_sent_again_not_answered_none() -> None:
    """1,200 put_uniques of fresh keys, all applied and answered, every answer lost; the writer sends
    them again in six messages and only the first (1..200) arrives, then its retries are lost too
    while its new writes come. When the hold-back runs out, the master skips what it answered
    before (the wack's ``after``): the writer sees the gap and keeps 201..1200 pending (to send
    again), never reads them as None ("not inserted"). (A reviewer's case, 2026-11-27.)"""
    net = SimNet(["a", "b"], seed=21)
    net.tag("a")
    net.run(0.5)
    master = net.nodes["a"].replica
    epoch = list(master.epoch)
    wire = [[n, PutUnique(f"u{n}", n, None, "", 0).to_wire()] for n in range(1, 1201)]
    for i in range(0, 1200, 200):
        master.handle(["writes", "job", "e" * 32, wire[i:i + 200], epoch], net.now)
    net._flush("a")
    net.run(0.5)
    out = record_sends(master)  # what follows: the writes' answers were lost
    writer = WriterCore("job", "e" * 32, 0.0)
    for n in range(1, 1201):
        writer.write(PutUnique(f"u{n}", n, None, "", 0), 0.0)
    master.handle(["writes", "job", "e" * 32, wire[:200], epoch], net.now)  # 201..1200 lost
    net._flush("a")
    for k in range(4):  # a new write each retry interval; the retries of 201..1200 are lost
        n = writer.write(Put(f"p{k}", k), net.now)
        master.handle(["write", "job", n, "e" * 32, Put(f"p{k}", k).to_wire(), epoch], net.now)
        net._flush("a")
        net.run(1.0)
    for m in out:
        if m[0] == "wack" and m[2] == "job":
            writer.handle(m, net.now)
    answers = dict(writer.answers())
    assert not [n for n in range(1, 1201) if n in answers and answers[n] is None]
    assert all(n not in answers for n in range(201, 1201)) and writer.answers_lost == 1000
    assert [answers[n] for n in range(1201, 1205)] == [None] * 4


@pytest.mark.parametrize("writer", ["a", "b"])
def test_small_puts_placed_together_are_one_record_and_each_is_answered(writer: str) -> None:
    """Consecutive small puts of one writer (the master's own, or a follower's that came in one
    ``writes`` message) are applied as one record (a ``many`` of their puts, the writer's last n),
    BATCH_BYTES of them at most; a put with an expiry or a large value, or another write, is a
    record of its own, in order. Every write is answered, and every replica holds what the master
    holds."""
    net = SimNet(["a", "b", "c"], seed=21)
    net.tag("a")
    net.run(0.5)
    node = net.nodes[writer]
    node.replica.to_send()
    value = "v" * 1000
    commands: list[Any] = [Put(f"k{i}", i) for i in range(5)]
    commands += [Put("e", 1, 60.0), Put("p0", 0), Put("p1", 1.5)]
    commands += [Put(f"m{i}", value) for i in range(20)]
    commands += [Put("huge", "y" * 2000), Increment("k1", 10), Put("k0", "after"), Put(b"q", None)]
    ns = [node.replica.write(cmd, net.now) for cmd in commands]
    sends = record_sends(net.nodes["a"].replica)
    net._flush(writer)
    net.run(1.0)
    records = [r for msg in sends if msg[0] == "log" for r in msg[2] if r[4] == node.replica.id]
    shapes = [(r[5], len(r[6][1]) if r[6][0] == "many" else 1) for r in records]
    # (the two small puts and 16 of the large ones fill a batch of BATCH_BYTES; the 17th begins the next)
    assert BATCH_BYTES == 16 * 1024
    assert shapes == [(ns[4], 5), (ns[5], 1), (ns[23], 18), (ns[27], 4), (ns[28], 1), (ns[29], 1), (ns[31], 2)]
    assert sorted(node.done) == ns and all(node.done[n] is None for n in ns)
    expected = {**{f"k{i}": i for i in range(5)}, "k1": 11, "k0": "after", "e": 1, "p0": 0, "p1": 1.5,
                **{f"m{i}": value for i in range(20)}, "huge": "y" * 2000, b"q": None}
    for name in "abc":
        assert net.contents(name) == expected, name


@pytest.mark.parametrize("op", [("put", "g", 0, "x"), ("put", "g", 0, [None]), ("put", "g", 0, float("nan")),
                                ("push", "g", 0, "x"), ("pop", "g", {}), ("many", [("put", "g", 0, "x")])])
def test_a_log_record_whose_expiry_is_no_number_is_malformed(op: Any) -> None:
    """A follower took a peer's record with the expiry "x" and held it: merged into the next
    master's state, it stopped that master's expiry timer with a TypeError (a fuzzer's find)."""
    net = SimNet(["a", "b", "c"], seed=3)
    net.tag("a")
    net.run(1.0)
    b = net.nodes["b"].replica
    before = (b.state.last_seq, net.contents("b"))
    log = ["log", list(b.epoch), [[b.state.last_seq + 1, list(b.epoch), 10**15, "a", "a.0", 99, list(op), None]]]
    with pytest.raises(StoreDecodeError, match="bad log record"):
        b.handle(log, net.now)
    assert (b.state.last_seq, net.contents("b")) == before


def test_a_resign_in_the_name_of_the_master_itself_is_ignored_by_it() -> None:
    """A master handed a resign of its own epoch (a peer's, or an echo) went on as master with no
    master known: stale, and its own writes were never answered (a fuzzer's find)."""
    net = SimNet(["a", "b", "c"], seed=3)
    net.tag("a")
    net.run(1.0)
    a = net.nodes["a"].replica
    a.handle(["resign", list(a.epoch), [a.state.last_seq, list(a.epoch)]], net.now)
    assert a.is_master and a.master == a.id and not a.stale
    n = net.write("a", Put("k", 1))
    net.run(1.0)
    assert net.nodes["a"].done[n] is None


def test_a_follower_applies_no_other_followers_batch_of_puts() -> None:
    """Every replica hears a follower's ``writes``: only the master applies them. A follower that
    applied another's batch of puts as a record of its own took the master's records at those
    seqs for ones it held: it diverged, and acknowledged records it never applied, so a write the
    master had acknowledged was lost when it died (a review's fuzzer)."""
    net = SimNet(["a", "b", "c"], seed=1)
    net.tag("a")
    net.run(0.5)
    n = net.nodes["a"].replica.write(Put("x", 1), net.now)
    for i in range(3):
        net.nodes["b"].replica.write(Put(f"k{i}", i), net.now)
    net._flush("a")
    net._flush("b")
    net.run(2.0)
    assert net.nodes["a"].done[n] is None
    expected = {"x": 1, "k0": 0, "k1": 1, "k2": 2}
    for name in "abc":
        assert net.contents(name) == expected, name
    net.kill("a")
    net.tag("c")
    net.run(3.0)
    for name in "bc":
        assert net.contents(name) == expected, name


def test_a_follower_acknowledges_nothing_before_the_master_checked_its_history() -> None:
    """b, paused, reads a's last records (never durable: c was cut off) and then c's claim in one
    go. It acknowledged its last seq in c's epoch although c holds other records at those seqs: c
    answered its put_unique as durable with no other replica holding it, and lost it when it died
    (a review's trace of a fuzzer's seed). An ack now waits until the master has checked the
    follower's history (its active, a tail or a snapshot)."""
    net = SimNet(["a", "b", "c"], seed=1, durability="one")
    net.tag("a")
    net.run(0.5)
    net.partition({"a", "b"}, {"c"})
    for i in range(5):
        net.write("a", Put(f"x{i}", i))
    net.run(0.2)
    net.pause("b")
    for i in range(20):
        net.write("a", Put(f"y{i}", i))  # not durable: b paused, c cut off
    n = net.write("c", PutUnique("u", "c", None, "c", 1))  # held by c's writer: no master reachable
    net.run(1.2)
    net.heal()
    net.untag("a")
    net.tag("c")  # c claims alone (it heard nobody for a while) and applies "u"
    net.run(0.02)
    net.resume("b")
    net.run(0.02)
    if n in net.nodes["c"].done:  # answered: then another replica holds it
        assert "u" in net.contents("b") or "u" in net.contents("a")
    net.kill("c")
    net.tag("a")
    net.run(5.0)
    if n in net.nodes["c"].done:
        assert "u" in net.contents("a")
    assert net.contents("a") == net.contents("b")
