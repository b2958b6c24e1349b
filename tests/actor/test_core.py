"""Tier 1: the sans-io core and its pieces, with no event loop."""

from __future__ import annotations

import collections
import math
import random

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncactor
from asyncactor import (
    ActorCore,
    Config,
    DecodeError,
    DetagEvent,
    EventQueue,
    GoodNodeEvent,
    Phase,
    PingEvent,
    RawMsgEvent,
    RecoverEvent,
    SetupEvent,
    TagEvent,
    UntagEvent,
    canonical_key,
    default_has_priority,
    default_ping_delay,
)
from asyncactor.history import Relation, relate
from asyncactor.messages import Hist, Init, Ping, Vers, decode, encode
from asyncactor.state import Timer

from .simnet import CuttableNet, SimNet, overlapping

CFG = Config(cycle=10, gap=1.5)


# ---- messages -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "msg",
    [
        Init("a"),
        Vers("a", Config(version=3, cycle=7, gap=2, nodes=-1, splits=3, n_hosts=4, force_in=True)),
        Ping("a", (1, "x"), ("a", "b", "c")),
        Ping("a", None, ("a",)),
        Hist({"k": 1}, ("b", "a")),
    ],
)
def test_round_trip(msg):
    wire = cbor2.loads(cbor2.dumps(encode(msg)))
    back = decode(wire)
    if isinstance(msg, Ping) and isinstance(msg.value, tuple):
        assert back.value == list(msg.value)
    else:
        assert back == msg
    assert wire["t"] in {"init", "vers", "ping", "hist"}


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        {},
        {"t": "nope"},
        {"t": "init"},
        {"t": "init", "node": 5},
        {"t": "ping", "node": "a", "value": 1},
        {"t": "ping", "node": "a", "history": []},
        {"t": "ping", "node": "a", "history": ["b", "a"]},
        {"t": "ping", "node": "a", "history": ["a", "a"]},
        {"t": "ping", "node": "a", "history": ["a", 3]},
        {"t": "hist", "value": 1, "history": "ab"},
        {"t": "vers", "node": "a", "version": 1},
        {
            "t": "vers",
            "node": "a",
            "version": 1,
            "cycle": -1,
            "gap": 1,
            "nodes": 5,
            "splits": 4,
            "n_hosts": 1,
        },
        {
            "t": "vers",
            "node": "a",
            "version": True,
            "cycle": 5,
            "gap": 1,
            "nodes": 5,
            "splits": 4,
            "n_hosts": 1,
        },
    ],
)
def test_decode_rejects_with_one_error_type(raw):
    with pytest.raises(DecodeError):
        decode(raw)


def test_truncated_cbor_is_not_our_problem_but_decode_of_partial_map_is():
    full = encode(Ping("a", 1, ("a", "b")))
    for key in full:
        partial = {k: v for k, v in full.items() if k != key}
        if key == "value":
            assert decode(partial).value is None  # a missing value is None
        else:
            with pytest.raises(DecodeError):
                decode(partial)


# ---- canonical values and priority ---------------------------------------------------------
MIXED = [None, False, True, -1, 0, 0.5, 1, 2**70, float("nan"), "", "a", b"", b"x", [], [1], (1, 2), {"a": 1}]


def test_canonical_key_is_total_and_list_tuple_blind():
    keys = [canonical_key(v) for v in MIXED]
    assert sorted(keys) == sorted(keys, key=lambda k: k)  # no TypeError
    assert canonical_key((1, "a", (2,))) == canonical_key([1, "a", [2]])
    assert canonical_key(1) == canonical_key(1.0)
    assert canonical_key(True) != canonical_key(1)


@given(st.lists(st.sampled_from(MIXED) | st.integers() | st.text(max_size=3), min_size=2, max_size=6))
def test_has_priority_is_a_strict_total_order(values):
    nodes = [(f"n{i}", v) for i, v in enumerate(values)]
    for a in nodes:
        for b in nodes:
            if a[0] == b[0]:
                continue
            ab, ba = default_has_priority(*a, *b), default_has_priority(*b, *a)
            assert ab != ba  # exactly one wins
    # the same winner whatever the wire did to tuples
    wired = [(n, cbor2.loads(cbor2.dumps(v))) for n, v in nodes]
    for a, w_a in zip(nodes, wired, strict=True):
        for b, w_b in zip(nodes, wired, strict=True):
            if a[0] != b[0]:
                assert default_has_priority(*a, *b) == default_has_priority(*w_a, *w_b)


def test_has_priority_rules():
    assert default_has_priority("z", 0, "a", None)  # None loses to anything
    assert not default_has_priority("a", None, "z", 0)
    assert default_has_priority("z", 2, "a", 1)  # larger value wins
    assert default_has_priority("a", 1, "z", 1)  # equal: smaller name
    assert default_has_priority("a", (1, 2), "z", [1, 2])
    assert not default_has_priority("z", "x", "a", "x")


def test_ping_delay_order():
    rng = random.Random(1)
    chain = [default_ping_delay(p, 5, 5, 10, rng) for p in range(5)]
    assert chain[0] == 2  # the previous pinger goes last
    assert chain[4] == 0.875 and chain[3] == 0.9375 and chain[2] == 0.96875
    assert all(chain[i] > chain[i + 1] for i in range(1, 4))
    offs = [default_ping_delay(None, 5, 5, 10, rng) for _ in range(2000)]
    early = [d for d in offs if d < 1 / 3]
    assert all(1.5 <= d < 2 for d in offs if d >= 1 / 3)
    assert 0 < len(early) < 2000 * 0.2


# ---- config --------------------------------------------------------------------------------
def test_config_validation():
    assert Config.from_mapping({}) == Config()
    with pytest.raises(ValueError, match="3 \\* gap"):
        Config.from_mapping({"cycle": 2, "gap": 1})
    assert Config.from_mapping({"cycle": 2, "gap": 1}, allow_short_cycle=True).cycle == 2
    assert Config.from_mapping({"cycle": 0.6, "gap": 0.2}).cycle == 0.6  # exactly 3 * gap, despite floats
    with pytest.raises(ValueError, match="3 \\* gap"):
        Config.from_mapping({"cycle": 0.59, "gap": 0.2})
    with pytest.raises(ValueError, match="unknown"):
        Config.from_mapping({"cylce": 5})
    with pytest.raises(ValueError):
        Config.from_mapping({"nodes": 0})


# ---- history relations ---------------------------------------------------------------------
def test_relate():
    local, parent = ("s", "p", "q"), ("p", "q")
    assert relate(("x", "s", "p"), local, parent) is Relation.SUCCESSION
    assert relate(("x", "p", "q"), local, parent) is Relation.COLLISION
    assert relate(("s", "p", "q"), local, parent) is Relation.REPEAT
    assert relate(("x", "y", "z"), local, parent) is Relation.DIVERGED
    assert relate(("x",), local, parent) is Relation.COLLISION  # knows nothing: competes
    assert relate(("x", "s"), (), ()) is Relation.FRESH


# ---- event queue policy ------------------------------------------------------------------
def _ping(n):
    return PingEvent(Ping(n, 1, (n,)))


def test_queue_coalesces_stale_news_but_never_drops_tags():
    q = EventQueue(raw_limit=3)
    q.put(_ping("a"))
    q.put(TagEvent("me", 1))
    q.put(_ping("b"))
    q.put(GoodNodeEvent(("x",)))
    q.put(UntagEvent())
    q.put(GoodNodeEvent(("y", "x")))
    for i in range(5):
        q.put(RawMsgEvent(i))
    q.put(RecoverEvent(0, False, ("me",), ("o",)))
    got = [q.get() for _ in range(len(q))]
    assert got == [
        TagEvent("me", 1),
        _ping("b"),
        GoodNodeEvent(("x", "y")),
        UntagEvent(),
        RawMsgEvent(2),
        RawMsgEvent(3),
        RawMsgEvent(4),
        RecoverEvent(0, False, ("me",), ("o",)),
    ]
    assert q.stats.coalesced_pings == 1 and q.stats.dropped_raw == 2
    with pytest.raises(IndexError):
        q.get()


# ---- the core alone ------------------------------------------------------------------------
def test_core_waits_for_its_init_then_pings_alone():
    core = ActorCore("a", config=CFG, value=1, rng=random.Random(0))
    core.start(0.0)
    (init,) = core.to_send()
    assert init == {"t": "init", "node": "a"}
    assert core.phase is Phase.STARTING and core.next_deadline is None
    core.receive(init, 0.1)
    assert core.phase is Phase.FOLLOWING
    assert core.next_deadline == pytest.approx(0.1 + 10 + 3)
    core.timer(13.1)
    (ping,) = core.to_send()
    assert ping == {"t": "ping", "node": "a", "value": 1, "history": ["a"]}
    core.timer(14.6)
    assert core.events() == [TagEvent("a", 1)]
    core.timer(13.1 + 10.75)
    assert core.events() == [UntagEvent()]
    core.receive(init, 30)  # a duplicating transport: counted, not fatal
    assert core.stats.duplicate_inits == 1


def test_core_counts_and_skips_bad_messages_but_reports_them_raw():
    core = ActorCore("a", config=CFG, raw=True)
    core.start(0)
    core.to_send()
    for bad in ({"t": "ping"}, "junk", {"t": "ping", "node": "b", "history": ["c"]}):
        core.receive(bad, 1)
    assert core.stats.bad_messages == 3
    assert [e.msg for e in core.events()] == [
        {"t": "ping"},
        "junk",
        {"t": "ping", "node": "b", "history": ["c"]},
    ]


def test_core_vers_higher_wins_lower_is_answered():
    core = ActorCore("a", config=CFG)
    core.start(0)
    core.receive({"t": "init", "node": "a"}, 0)
    core.to_send()
    newer = Config(version=2, cycle=20, gap=2)
    core.receive(encode(Vers("b", newer)), 1)
    assert core.config == newer and core.events() == [SetupEvent(newer)]
    core.receive(encode(Vers("c", Config(version=1))), 2)
    (answer,) = core.to_send()
    assert answer["t"] == "vers" and answer["version"] == 2


def test_core_holder_answers_a_burst_of_inits_once_per_gap():
    core = ActorCore("a", config=CFG, value=1, rng=random.Random(0))  # gap 1.5
    core.start(0.0)
    core.receive({"t": "init", "node": "a"}, 0.1)
    core.timer(13.1)
    core.to_send()  # our ping: we hold the slot
    core.receive({"t": "init", "node": "b"}, 20.0)
    (answer,) = core.to_send()
    assert answer["t"] == "vers" and answer["node"] == "a"
    for at, node in ((20.5, "c"), (21.0, "d")):  # within gap of that answer: one more, at 21.5
        core.receive({"t": "init", "node": node}, at)
        assert core.to_send() == []
    assert core.deadline(Timer.VERS) == pytest.approx(21.5)
    core.timer(21.5)
    (answer,) = core.to_send()
    assert answer["t"] == "vers"
    assert core.deadline(Timer.VERS) is None
    core.receive({"t": "init", "node": "e"}, 23.0)  # gap after the last answer: at once
    (answer,) = core.to_send()
    assert answer["t"] == "vers" and core.deadline(Timer.VERS) is None


def test_core_good_node_event_when_we_have_no_value():
    core = ActorCore("a", config=CFG)
    core.start(0)
    core.receive(encode(Ping("b", 5, ("b",))), 1)
    assert GoodNodeEvent(("b",)) in core.events()


# ---- many cores, no loop -------------------------------------------------------------------
def _jitter(rng, lo, hi):
    return lambda a, b: 0.0 if a == b else rng.uniform(lo, hi)


@pytest.mark.parametrize("n", [5, 20])
def test_sim_exclusive_and_fair(n):
    rng = random.Random(n)
    net = SimNet(
        [f"n{i:02d}" for i in range(n)], config=CFG, seed=n, latency=_jitter(rng, 0.0, 0.74), value=1
    )
    net.run_until(11.5 * 600)
    ts = net.tenures()
    assert not overlapping(ts)
    assert len(ts) > 500
    per = collections.Counter(t[0] for t in ts)
    assert len(per) == n  # everybody got a turn


@pytest.mark.parametrize(("n_hosts", "max_wait"), [(3, 100), (10, None)])
def test_sim_off_chain_nodes_join_the_rotation_by_early_bids(n_hosts, max_wait):
    """Three nodes started together: two form the chain at once, the third gets in only by an
    early bid (probability 1 / (free places x n_hosts) per slot, docs/asyncactor.md § 3)."""
    cfg = Config(cycle=0.4, gap=0.1, n_hosts=n_hosts)
    waits = []
    for seed in range(40):
        rng = random.Random(seed)
        net = SimNet(["a", "b", "c"], config=cfg, seed=seed, latency=_jitter(rng, 0.0, 0.01), value=1)
        net.run_until(0.5 * 200)
        ts = net.tenures()
        assert not overlapping(ts)
        turns = [t[0] for t in ts]
        assert len(turns) > 150
        waits.append(max(turns.index(n) if n in turns else len(turns) for n in "abc"))
    if max_wait is not None:
        assert max(waits) < max_wait  # (8/9)^100 < 1e-5 per run: the live rotate test relies on it
    # whatever n_hosts, the third node waits for its early bid: mean 1/p slots (9 or 30)
    mean = sum(waits) / len(waits)
    assert 0.4 * 3 * n_hosts < mean < 2.5 * 3 * n_hosts, waits


def test_sim_50_nodes_2000_slots():
    """The issue's scale target, in the loop-free tier (a few seconds; tier 2 runs 200 slots)."""
    n, slots = 50, 2000
    rng = random.Random(n)
    net = SimNet(
        [f"n{i:02d}" for i in range(n)],
        config=Config(cycle=10, gap=1.5, n_hosts=n),
        seed=n,
        latency=_jitter(rng, 0.2 * 1.5, 0.49 * 1.5),  # up to 0.49 * gap
        value=1,
    )
    net.run_until(11.6 * slots)
    ts = net.tenures()
    assert len(ts) >= slots
    assert not overlapping(ts)
    turns = collections.Counter(t[0] for t in ts)
    assert len(turns) > 0.8 * n
    assert max(b[1] - a[1] for a, b in zip(ts, ts[1:], strict=False)) < 2 * 10 + 3 * 1.5


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 8),
    seed=st.integers(0, 10**6),
    lat=st.floats(0.0, 0.49),
    values=st.lists(st.sampled_from([None, 1, 2, "x", (1,)]), min_size=8, max_size=8),
)
def test_sim_at_most_one_it_while_connected(n, seed, lat, values):
    rng = random.Random(seed)
    gap = CFG.gap
    net = SimNet([], config=CFG, seed=seed, latency=_jitter(rng, 0.0, lat * gap))
    for i in range(n):
        net.add(f"n{i}", value=values[i])
    net.run_until(11.5 * 60)
    assert not overlapping(net.tenures())


def test_sim_split_and_heal_one_recover_per_chain_node_per_side():
    cfg = Config(cycle=10, gap=1.5, nodes=4, splits=4)
    names = [f"n{i}" for i in range(8)]
    rng = random.Random(5)
    net = SimNet(names, config=cfg, seed=5, latency=_jitter(rng, 0.1, 0.4), value=1)
    net.run_until(200)
    a, b = set(names[::2]), set(names[1::2])
    net.groups = {n: (0 if n in a else 1) for n in names}
    net.run_until(300)
    before = {n: c.history for n, c in net.cores.items()}
    net.groups = None
    net.run_until(400)
    recs = [(n, ev) for t, n, ev in net.events if isinstance(ev, RecoverEvent)]
    for side in (a, b):
        hist = {before[n] for n in side}
        chain = set().union(*hist) & side
        got = collections.Counter(n for n, _ in recs if n in side)
        assert set(got) == chain and all(v == 1 for v in got.values())
        flags = {ev.replace for n, ev in recs if n in side}
        assert len(flags) == 1
    assert {ev.replace for n, ev in recs if n in a} != {ev.replace for n, ev in recs if n in b}
    assert not overlapping(net.tenures(), since=300 + 10 + 3 * 1.5)


def test_core_imports_no_io():
    import pathlib

    root = pathlib.Path(asyncactor.__file__).parent
    for mod in ("protocol", "recovery", "collision", "state", "history", "policy", "messages", "events", "config", "queue"):
        src = (root / f"{mod}.py").read_text()
        for banned in ("import anyio", "import trio", "import time", "import socket", "import asyncio"):
            assert banned not in src, (mod, banned)
    assert math  # keep import used


# ---- churn: newcomers judge crossing pings from a partial view -----------------------------
def _churn(seed: int, kills: int, lat: float, jit: float, *, sticky: bool = False) -> SimNet:
    """Kill the "it" node somewhere in its tenure ``kills`` times, a newcomer joining at once."""
    rng, lrng = random.Random(seed), random.Random(seed + 1)
    net = SimNet(
        [f"n{i:03d}" for i in range(5)],
        config=CFG,
        seed=seed,
        latency=lambda a, b: 0.0 if a == b else lat + lrng.uniform(0, jit),
        value=1,
        sticky=sticky,
    )
    spawned, done = 5, 0
    net.run_until(5 * 11.5)
    while done < kills:
        its = [n for n, c in net.cores.items() if c.is_it]
        if not its:
            net.run_until(net.now + 0.05)
            continue
        victim = its[0]
        net.run_until(net.now + rng.uniform(0, 3 * CFG.cycle if sticky else 0.9 * CFG.cycle))
        if victim not in net.cores or not net.cores[victim].is_it:
            continue
        net.kill(victim)
        done += 1
        net.add(f"n{spawned:03d}", value=1, sticky=sticky)
        spawned += 1
        net.run_until(net.now + 3 * 11.5)
    return net


@pytest.mark.parametrize("sticky", [False, True], ids=["rotation", "sticky"])
@pytest.mark.parametrize(("lat", "jit"), [(0.05, 0.15), (0.2, 0.5), (0.3, 0.44)])  # max 0.49 * gap
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sim_newcomers_under_churn_never_two_its(seed, lat, jit, sticky):
    net = _churn(seed, 60, lat, jit, sticky=sticky)
    assert not overlapping(net.tenures())
    # joining is not a split, and no tag is cut short
    assert not [ev for _, _, ev in net.events if isinstance(ev, RecoverEvent | DetagEvent)]


# ---- healed splits over many seeds ---------------------------------------------------------
SPLIT_CFG = Config(cycle=10, gap=1.5, nodes=4, splits=4)
HEAL, SETTLE = 300.0, SPLIT_CFG.cycle + 4.5 * SPLIT_CFG.gap  # docs/asyncactor.md §7


def _split_heal(
    seed: int, lo: float, hi: float, *, beacon: bool = False
) -> tuple[SimNet, tuple[set[str], set[str]], dict]:
    """8 nodes, split into two sides at t = 200, healed at HEAL, run 150 s more."""
    names = [f"n{i}" for i in range(8)]
    rng = random.Random(seed)
    cfg = SPLIT_CFG.with_changes(heal_beacon=beacon)
    net = SimNet(names, config=cfg, seed=seed, latency=_jitter(rng, lo, hi), value=1)
    net.run_until(200)
    sides = (set(names[::2]), set(names[1::2]))
    net.groups = {n: (0 if n in sides[0] else 1) for n in names}
    net.run_until(HEAL)
    chains = {n: c.history for n, c in net.cores.items()}
    net.groups = None
    net.run_until(HEAL + 150)
    return net, sides, chains


@pytest.mark.parametrize("beacon", [False, True], ids=["plain", "beacon"])
@pytest.mark.parametrize(("lo", "hi"), [(0.1, 0.4), (0.0, 0.74)])  # latency up to 0.49 * gap
@pytest.mark.parametrize("seed", range(60))
def test_sim_split_heal_sweep(seed, lo, hi, beacon):
    net, sides, chains = _split_heal(seed, lo, hi, beacon=beacon)
    # (messages in flight when the network splits are lost, which may rightly open a recovery
    # inside a side; the heal is what is tested here)
    recs = [(n, ev) for t, n, ev in net.events if isinstance(ev, RecoverEvent) and t >= HEAL]
    flags = []
    for side in sides:
        got = collections.Counter(n for n, _ in recs if n in side)
        assert set(got.values()) == {1}  # one RecoverEvent per node and healed split
        # every chain node of the side at the heal reports (and so may a node that pinged after
        # the heal, before the split was noticed), each from its place on its side's chain
        at_heal = set().union(*(chains[n] for n in side)) & side
        assert at_heal <= set(got)
        assert all(ev.local_nodes[ev.prio] == n and ev.remote_nodes for n, ev in recs if n in side)
        (flag,) = {ev.replace for n, ev in recs if n in side}
        flags.append(flag)
    assert sorted(flags) == [False, True]  # one side replaced, the other kept
    settle = SPLIT_CFG.cycle if beacon else SETTLE  # heal_beacon: one "it" within one cycle
    assert not overlapping(net.tenures(), since=HEAL + settle)  # one "it" once settled ...
    assert [t for t in net.tenures() if t[1] > HEAL + SETTLE]  # ... and electing goes on


# Regression (issue 3): the losing side set aside the winners' pings that came before its
# decision and followed the first one after it, which could be the loser of a collision among
# the winners; the loser side then answered a slot nobody else held, a second episode opened
# (a second RecoverEvent per chain node) and two nodes were "it" until it was resolved.  Before
# the fix this range held 6 such heals (seeds 213, 316, 580, 613, 649 and 381 below).
@pytest.mark.parametrize(
    ("lo", "hi", "first", "beacon"),
    [(0.0, 0.74, k * 100, False) for k in range(7)]
    + [(0.1, 0.4, 300, False), (0.0, 0.74, 700, True), (0.1, 0.4, 800, True)],
)
def test_sim_split_heal_no_second_recovery(lo, hi, first, beacon):
    bad = []
    settle = SPLIT_CFG.cycle if beacon else SETTLE
    for seed in range(first, first + 100):
        net, _, _ = _split_heal(seed, lo, hi, beacon=beacon)
        recs = collections.Counter(n for t, n, ev in net.events if isinstance(ev, RecoverEvent) and t >= HEAL)
        double = overlapping(net.tenures(), since=HEAL + settle)
        if any(v != 1 for v in recs.values()) or not recs or double:
            bad.append((seed, dict(recs), double[:1]))
    assert bad == []


# Regression (issue 3, second episode): a winners' ping sent just before the heal reaches only its
# own side; when it collides with a winners' ping sent just after the heal, the losers see only
# the collision's loser.  Replaying it confirmed their view, so a loser bid answering a slot the
# winners never held: a second episode (seed 1428: second RecoverEvent on 5 nodes, double "it"
# until 34.4 s after the heal).  And a loser that followed a winners' repeat took its own old
# history as that ping's parent, so the next winners' ping looked like yet another split (1407).
@pytest.mark.parametrize("seed", [1407, 1428])
def test_sim_split_heal_lost_collision_winner(seed):
    net, _, _ = _split_heal(seed, 0.0, 0.74)
    recs = collections.Counter(n for t, n, ev in net.events if isinstance(ev, RecoverEvent) and t >= HEAL)
    assert recs and set(recs.values()) == {1}
    assert not overlapping(net.tenures(), since=HEAL + SETTLE)


# ---- heal beacon (docs/asyncactor.md §7) ---------------------------------------------------
def test_heal_beacon_is_a_no_op_on_its_own_side_and_stays_local():
    cfg = Config(cycle=10, gap=1.5, heal_beacon=True)
    rng = random.Random(3)
    net = SimNet([f"n{i}" for i in range(5)], config=cfg, seed=3, latency=_jitter(rng, 0.0, 0.74), value=1)
    net.run_until(11.5 * 100)
    beacons = sum(c.stats.beacons_sent for c in net.cores.values())
    assert len(net.tenures()) - 10 <= beacons <= len(net.tenures())  # one per tenure (chain >= 3)
    assert not overlapping(net.tenures())
    assert not [ev for _, _, ev in net.events if isinstance(ev, RecoverEvent | DetagEvent)]
    assert not sum(c.stats.hists_sent for c in net.cores.values())  # no recovery hist either
    # not on the wire: a newer group configuration keeps this node's own setting
    core = net.cores["n0"]
    core.receive(encode(Vers("x", Config(version=5, cycle=12, gap=1.5))), net.now)
    assert core.config.cycle == 12 and core.config.heal_beacon
    assert "heal_beacon" not in encode(Vers("x", cfg))


# Regression (issue 3, heal beacon on, latency up to 0.49 * gap): each of these seeds left two
# "it" later than one cycle after the heal (docs/asyncactor.md §7, "Healed splits").
# 3222 (22.3 s): two of the winners' pingers collided at the heal and each sent its hist; the
# losers adopted the best of the two by has_priority, which was the collision's loser, and then
# judged the winners' next ping as a losing repeat of its parent.  Now the other hist's head is a
# candidate of a collision they could not judge, and that ping names the winner.
# 302 (10.08 s): a node sent its ping just after the other side's ping had reached it, so the
# crossing-pings rule (which acted only on a ping arriving after ours) never compared the two.
# 637 (23.0 s, a RecoverEvent missing): messages lost at the cut left one node on a view of its
# own; its side, having won an earlier episode, ignored its pings for that episode's 3 cycles
# while it decided alone against a stale beacon.  The 302 rule changes this seed's course (the
# split-time episode is decided by both views alike); the mechanism itself is still open.
@pytest.mark.parametrize("seed", [3222, 637, 302])
def test_sim_split_heal_beacon_within_one_cycle(seed):
    net, sides, chains = _split_heal(seed, 0.0, 0.74, beacon=True)
    recs = [(n, ev) for t, n, ev in net.events if isinstance(ev, RecoverEvent) and t >= HEAL]
    flags = []
    for side in sides:
        got = collections.Counter(n for n, _ in recs if n in side)
        assert set(got.values()) == {1}
        assert set().union(*(chains[n] for n in side)) & side <= set(got)
        assert all(ev.local_nodes[ev.prio] == n and ev.remote_nodes for n, ev in recs if n in side)
        (flag,) = {ev.replace for n, ev in recs if n in side}
        flags.append(flag)
    assert sorted(flags) == [False, True]
    assert not overlapping(net.tenures(), since=HEAL + SPLIT_CFG.cycle)
    assert [t for t in net.tenures() if t[1] > HEAL + SETTLE]


# ---- a node cut off from the broker (offline/online) -------------------------------------------
STICKY_CFG = Config(cycle=3, gap=1)


def _cut_followers(seed: int, *, hold_own: bool, signal: bool, cuts: int = 12) -> tuple[CuttableNet, int]:
    """Three sticky nodes; ``cuts`` times a follower's connection drops for 1-2.5 s (QoS 1 session:
    what was sent to it arrives after the heal). Returns the net and how many times the tag moved."""
    rng = random.Random(seed)
    net = CuttableNet(["a", "b", "c"], hold_own=hold_own, signal=signal, config=STICKY_CFG, seed=seed,
                      latency=lambda s, d: 0.0 if s == d else 0.01 + rng.uniform(0, 0.02), value=1, sticky=True)
    net.run_until(30)
    def holders() -> list[str]:
        return [n for n, c in net.cores.items() if c.is_it]

    moves = 0
    for _ in range(cuts):
        deadline = net.now + 30
        while len(holders()) != 1 and net.now < deadline:
            net.run_until(net.now + 0.1)
        (holder,) = holders()
        follower = rng.choice([n for n in net.cores if n != holder])
        net.run_until(net.now + rng.uniform(0, 2))
        net.cut(follower)
        net.run_until(net.now + rng.uniform(1.0, 2.5))
        net.heal(follower)
        net.run_until(net.now + 8)
        moves += holders() != [holder]  # moved, or nobody holds it
    return net, moves


@pytest.mark.parametrize("seed", range(6))
def test_sim_a_cut_follower_never_takes_a_live_sticky_holders_tag(seed):
    net, moves = _cut_followers(seed, hold_own=False, signal=True)
    assert moves == 0
    assert overlapping(net.tenures()) == []
    # nobody tagged itself while cut off: every tenure belongs to the one holder
    assert len({n for n, _, _ in net.tenures()}) == 1


def test_sim_without_offline_a_stale_bid_takes_the_tag():
    """The bug this guards against (issue 23, found by bench/chaos.py): a follower's bid made while
    it was cut off reaches the group after the heal, collides with the holder's renewal it missed,
    and wins (the holder repeating itself is nearest in the collision order)."""
    moves = sum(_cut_followers(seed, hold_own=True, signal=False)[1] for seed in range(6))
    assert moves > 0


def test_core_offline_gives_up_a_bid_and_bids_again_only_after_a_full_wait_online():
    core = ActorCore("a", config=STICKY_CFG, value=1, sticky=True, rng=random.Random(0))
    core.start(0.0)
    core.receive(core.to_send()[0], 0.0)
    core.receive(encode(Ping("b", 1, ("b",))), 0.5)  # b holds the tag
    bid_at = core.deadline(Timer.PING)
    assert bid_at is not None
    core.timer(bid_at)  # the holder is silent: confirmed gap/4 later
    bid_at = core.deadline(Timer.PING)
    core.timer(bid_at)
    assert core.phase is Phase.PINGED and core.to_send()
    core.offline(bid_at + 0.1)
    assert core.phase is Phase.FOLLOWING and core.deadline(Timer.TAG) is None
    assert core.deadline(Timer.PING) is None
    core.timer(bid_at + 5)
    assert core.to_send() == [] and not core.is_it  # no bid, no tag while offline
    assert not any(isinstance(e, TagEvent) for e in core.events())
    core.online(10.0)
    # a bid only after the holder had the time to renew (cycle - 1.5 gap) and a margin
    assert core.deadline(Timer.PING) >= 10.0 + STICKY_CFG.cycle - 1.5 * STICKY_CFG.gap + STICKY_CFG.gap
    core.offline(11.0)
    core.offline(11.0)  # idempotent
    assert core.deadline(Timer.PING) is None


def test_core_sticky_holder_renews_when_back_or_loses_the_tag_when_its_tag_ran_out():
    def holder() -> ActorCore:
        core = ActorCore("a", config=STICKY_CFG, value=1, sticky=True, rng=random.Random(0))
        core.start(0.0)
        core.receive(core.to_send()[0], 0.0)
        core.timer(core.deadline(Timer.PING))
        core.timer(core.deadline(Timer.TAG))
        assert core.is_it
        core.to_send(), core.events()
        return core

    core = holder()
    renew = core.deadline(Timer.PING)
    core.offline(renew - 0.1)
    core.timer(renew)
    assert core.to_send() == [] and core.is_it  # the renewal waits for the connection
    core.online(renew + 0.3)
    (ping,) = core.to_send()
    assert decode(ping) == Ping("a", 1, ("a",)) and core.is_it and core.events() == []

    core = holder()
    renew = core.deadline(Timer.PING)
    core.offline(renew - 0.1)
    core.timer(renew)
    core.timer(core.deadline(Timer.UNTAG))
    assert not core.is_it and core.events() == [UntagEvent()]
    core.online(renew + 5)
    assert core.to_send() == []  # no stale renewal after the tag ran out
    assert core.deadline(Timer.PING) is not None


def test_core_offline_while_starting_announces_itself_again_online():
    core = ActorCore("a", config=STICKY_CFG, value=1, sticky=True, rng=random.Random(0))
    core.start(0.0)
    assert core.to_send() == [{"t": "init", "node": "a"}]  # lost: we were cut off
    core.offline(0.1)
    core.online(1.0)
    assert core.to_send() == [{"t": "init", "node": "a"}]


@pytest.mark.parametrize("seed", range(6))
def test_sim_a_paused_follower_never_takes_a_live_sticky_holders_tag(seed):
    """SIGSTOP a follower (half of the pauses 1-6 s); on SIGCONT its overdue bid timer runs before it
    reads the holder's renewals waiting in its socket. The bid is put off (it fires more than gap/4 late),
    the renewals are read, and the holder keeps its tag. Every other pause ends just before or
    after its bid fell due (less than gap/4 late: the bid is confirmed gap/4 later, and the
    renewals are read first)."""
    rng = random.Random(seed)
    net = CuttableNet(["a", "b", "c"], hold_own=False, signal=False, config=STICKY_CFG, seed=seed,
                      latency=lambda s, d: 0.0 if s == d else 0.01 + rng.uniform(0, 0.02), value=1, sticky=True)
    net.run_until(30)
    (holder,) = [n for n, c in net.cores.items() if c.is_it]
    for _ in range(12):
        follower = rng.choice([n for n in net.cores if n != holder])
        net.run_until(net.now + rng.uniform(0, 2))
        net.pause(follower)
        due = net.paused[follower].deadline(Timer.PING)
        if due is not None and rng.random() < 0.5:  # ends about when its bid falls due
            net.run_until(max(net.now, due + rng.uniform(-0.02, STICKY_CFG.gap / 4)))
        else:
            net.run_until(net.now + rng.uniform(1.0, 6.0))
        net.resume(follower)
        net.run_until(net.now + 8)
        assert [n for n, c in net.cores.items() if c.is_it] == [holder]
    assert {n for n, _, _ in net.tenures()} == {holder}


def test_core_a_bid_that_fires_late_waits_once_for_the_pings_that_came_meanwhile():
    core = ActorCore("a", config=STICKY_CFG, value=1, sticky=True, rng=random.Random(0))
    core.start(0.0)
    core.receive(core.to_send()[0], 0.0)
    core.receive(encode(Ping("b", 1, ("b",))), 0.5)
    due = core.deadline(Timer.PING)
    core.timer(due + 3)  # paused for 3 s
    assert core.to_send() == [] and core.phase is Phase.FOLLOWING
    again = core.deadline(Timer.PING)
    assert again >= due + 3 + STICKY_CFG.cycle - 1.5 * STICKY_CFG.gap + STICKY_CFG.gap
    core.timer(again + 3)  # late again (a node that is always late): it bids this time, once confirmed
    assert core.to_send() == []
    core.timer(core.deadline(Timer.PING))
    (ping,) = core.to_send()
    assert decode(ping).node == "a"
    # a bid on time is not put off
    core2 = ActorCore("a", config=STICKY_CFG, value=1, sticky=True, rng=random.Random(0))
    core2.start(0.0)
    core2.receive(core2.to_send()[0], 0.0)
    core2.receive(encode(Ping("b", 1, ("b",))), 0.5)
    core2.timer(core2.deadline(Timer.PING) + STICKY_CFG.gap / 4)
    core2.timer(core2.deadline(Timer.PING))
    assert len(core2.to_send()) == 1


def test_core_a_sticky_followers_bid_is_confirmed_and_a_renewal_read_meanwhile_cancels_it():
    """The holder's renewal is overdue when a follower's bid falls due, but it may be waiting unread
    behind the timer (the follower's loop stalled until about then: a long garbage collection). The
    bid is confirmed gap/4 later, so input is read first; a renewal read meanwhile keeps the tag."""
    def follower() -> ActorCore:
        core = ActorCore("a", config=STICKY_CFG, value=1, sticky=True, rng=random.Random(0))
        core.start(0.0)
        core.receive(core.to_send()[0], 0.0)
        core.receive(encode(Ping("b", 1, ("b",))), 0.5)  # b holds the tag
        return core

    core = follower()
    due = core.deadline(Timer.PING)
    core.timer(due)
    assert core.to_send() == [] and core.deadline(Timer.PING) == pytest.approx(due + STICKY_CFG.gap / 4)
    core.receive(encode(Ping("b", 1, ("b",))), due + 0.01)  # the renewal, read after the timer
    assert core.deadline(Timer.PING) > due + STICKY_CFG.cycle / 2
    core.timer(due + STICKY_CFG.gap / 4)
    assert core.to_send() == [] and core.phase is Phase.FOLLOWING
    # nothing came: the bid goes out gap/4 after it fell due
    core = follower()
    due = core.deadline(Timer.PING)
    core.timer(due)
    core.timer(due + STICKY_CFG.gap / 4)
    (ping,) = core.to_send()
    assert decode(ping).node == "a" and core.phase is Phase.PINGED
