"""Elected-store failover on the embedded mosquitto: kill -9 the master, rotate it, against a stable master.

Every node is its own OS process (tests/elected_node.py, with timestamped
ACK lines), memory backend, durability "one", ``--writers`` writes in flight per node. One run, one
mosquitto, three phases, each in a fresh namespace:

1. **sticky kills** (cycle 1 s, gap 0.25 s): 3 nodes; ``--kills`` times SIGKILL the current master and
   start a replacement (always 3 nodes). Per kill: *kill -> new master* = the first ``MASTER`` line with a
   higher term at a survivor (its ``time.monotonic()``) minus the orchestrator's ``time.monotonic()`` just
   before the kill (processes of one machine share CLOCK_MONOTONIC); *write unavailability* = the longest
   gap between consecutive acknowledged writes of the survivors (merged) from the last ack before the kill
   to the first ack after the new master became active; *data moved* = records + snapshot entries the new
   master received between the kill (its statistics asked for with SIGWINCH just before) and its MASTER line.
2. **rotate** (cycle 0.4 s, gap 0.1 s, n_hosts 3): 3 nodes, the master moves every slot; runs until ``--migrations``
   new terms became active. Acked writes/s summed over the nodes in that window; per migration the longest
   gap between consecutive acks (all nodes merged) in the window between the midpoints to the previous
   and next migration; data moved per migration = sum over nodes of (records_fetched + snapshot_entries)
   / sum of masterships, from the final DUMP statistics (records_fetched also counts a follower's resync
   tails); and per migration, what the new master had received (records + snapshot entries) since the
   previous master change it saw (from its STATS lines).
3. **baseline**: the same 3 nodes, sticky, no kills, for the rotate window's duration: acked writes/s.
   The table gives rotate / stable. Its election runs at cycle 1 s, gap 0.25 s (``--baseline-cycle``):
   at 0.4 s a loaded machine moved even a sticky master every second or so. Under write load it still
   moves now and then at 1 s: the new terms in its window and its longest ack gap are printed.

After each phase every live node goes quiet and dumps; the contents must be identical, every
acknowledged write (of live and killed nodes) present, none applied twice (tests/store/elected_procs.py
``check_converged``). Node stderr is kept and scanned for tracebacks. Prints a table, writes
bench/results/failover.json. Run: ``python bench/failover.py [--kills 10] [--migrations 50]`` (about
2-3 minutes with the defaults). ``--soak SECONDS`` runs only the baseline phase, for that long, and
reports its unforced new terms (issue 20: none in 10 minutes at full write load); its writers push
onto lists of 1,000 (``--chunk``), since every replica copies a list per push. ``--trace DIR`` keeps
the nodes' stderr there, with their garbage collections, event-loop stalls and the stores' log lines
(tests/elected_node.py, ``ELECTED_TRACE``)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "store"))

from elected_procs import ElectedProc, check_converged, wait_for  # noqa: E402 - shared with the live tests
from quantile import nearest_rank  # noqa: E402 - bench/ is this script's own directory

NODE = ROOT / "tests" / "elected_node.py"


class Stuck(RuntimeError):
    """The store did not get where it should within the timeout (no master, no acks)."""


class Node(ElectedProc):
    """An ElectedProc whose acks carry the node's monotonic time, with its stderr kept in a file."""

    def __init__(self, url: str, namespace: str, store: str, mode: str, cycle: float, gap: float, *,
                 writers: int, durability: str, stderr_path: Path, n_hosts: int | None = None, chunk: int = 0) -> None:
        self.stderr_path = stderr_path
        self.started = time.monotonic()
        self.ack_times: list[float] = []
        self.stats_at: list[tuple[int, str, dict[str, int]]] = []  # (term, master, statistics) per MASTER line
        self.counters: list[dict[str, int]] = []  # statistics asked for with SIGWINCH
        self.garbled: list[str] = []  # lines that did not parse
        with stderr_path.open("w") as err:
            super().__init__(url, namespace, store, mode, cycle, gap, writers=writers, durability=durability,
                             n_hosts=n_hosts, chunk=chunk, stderr=err)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self._take(line)
            except (ValueError, IndexError):  # keep reading: a stalled reader would block the node
                self.garbled.append(line)

    def _line(self, kind: str, rest: str) -> None:
        if kind == "ACK":
            i, t = rest.split(" ")
            self.acks.append(int(i))
            self.ack_times.append(float(t))
        elif kind == "STATS":
            term, master, _ = self.masters[-1]
            self.stats_at.append((term, master, json.loads(rest)))
        elif kind == "COUNTERS":
            self.counters.append(json.loads(rest))
        else:
            super()._line(kind, rest)

    def acks_between(self, lo: float, hi: float) -> list[float]:
        with self._lock:
            return [t for t in self.ack_times if lo <= t <= hi]

    def all_ack_times(self) -> list[float]:
        with self._lock:
            return list(self.ack_times)

    def all_masters(self) -> list[tuple[int, str, float]]:
        with self._lock:
            return list(self.masters)

    def stderr_problems(self) -> list[str]:
        text = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return [line for line in text.splitlines() if "Traceback" in line or "Error" in line]


class Cluster:
    """The nodes of one phase, in one namespace; every node ever started is remembered."""

    def __init__(self, url: str, mode: str, cycle: float, gap: float, args: argparse.Namespace, logdir: Path,
                 label: str) -> None:
        self.url, self.mode, self.cycle, self.gap, self.args = url, mode, cycle, gap, args
        self.namespace = "bfo" + uuid.uuid4().hex[:10]
        self.logdir, self.label = logdir, label
        self.live: list[Node] = []
        self.everyone: list[Node] = []

    def spawn(self) -> Node:
        # rotate: the election knows the group's size (3), so that every node gets its turns soon
        # (docs/elected-stores.md § 1); sticky keeps the default, as users of it would
        n = Node(self.url, self.namespace, "s", self.mode, self.cycle, self.gap, writers=self.args.writers,
                 durability=self.args.durability, n_hosts=3 if self.mode == "rotate" else None,
                 stderr_path=self.logdir / f"{self.label}-{len(self.everyone)}.err",
                 chunk=1000 if self.args.soak else 0)
        self.live.append(n)
        self.everyone.append(n)
        return n

    def latest_master(self, nodes: list[Node] | None = None) -> tuple[int, str, float] | None:
        seen = [m for n in (nodes or self.live) if (m := n.current_master())]
        return max(seen) if seen else None

    def start(self, k: int = 3) -> None:
        for _ in range(k):
            self.spawn()
        for n in self.live:
            n.wait_ready(60)
        if not wait_for(lambda: self.latest_master() is not None and all(len(n.acks) > 20 for n in self.live), 60):
            raise Stuck(f"{self.label}: no master with acks 60 s after start: {self.describe()}")

    def describe(self) -> str:
        return "; ".join(f"{n.node_id}: acks={len(n.acks)} master={n.current_master()} "
                         f"rc={n.proc.poll()}" for n in self.everyone)

    def check(self) -> dict[str, Any]:
        """check_converged over the live nodes (all nodes' acks), as a result instead of an exception."""
        acked = sum(len(n.acks) for n in self.everyone)
        try:
            contents = check_converged(self.live, self.everyone)
        except (AssertionError, TimeoutError) as e:
            return {"ok": False, "acked_writes": acked, "error": f"{type(e).__name__}: {e}"}
        stored = sum(len(v) for k, v in contents.items() if k.startswith('"log-'))
        return {"ok": True, "acked_writes": acked, "stored_writes": stored, "error": None}

    def stop(self) -> list[str]:
        """Terminate every node; returns the traceback/error lines their stderr held before shutdown."""
        problems = [f"{n.stderr_path.name}: {line}" for n in self.everyone for line in n.stderr_problems()]
        problems += [f"{n.stderr_path.name}: garbled stdout line {line!r}" for n in self.everyone for line in n.garbled]
        for n in self.live:
            n.terminate()
        for n in self.everyone:
            n.kill()
        return problems


def _gap(times: list[float]) -> float:
    return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def _moved(stats: dict[str, int]) -> int:
    return stats["records_fetched"] + stats["snapshot_entries"]


def _moved_at_takeover(nodes: list[Node], terms: set[int]) -> list[int]:
    """Per mastership with a term in ``terms``: records + snapshot entries the new master received between
    the previous master change it saw (or its start) and its becoming master."""
    moved = []
    for n in nodes:
        before = 0
        for term, master, stats in list(n.stats_at):
            if term in terms and master == n.node_id:
                moved.append(_moved(stats) - before)
            before = _moved(stats)
    return moved


def _newest(nodes: list[Node], t: float) -> str | None:
    """The node started last before ``t``."""
    before = [n for n in nodes if n.started < t]
    return max(before, key=lambda n: n.started).node_id if before else None


def _longest_gap(nodes: list[Node]) -> tuple[float, float | None]:
    """The longest gap between consecutive acks of ``nodes`` (merged), and when it began."""
    times = sorted(t for n in nodes for t in n.all_ack_times())
    return max(((b - a, a) for a, b in zip(times, times[1:], strict=False)), default=(0.0, None))


def _firsts(nodes: list[Node]) -> dict[int, tuple[float, str]]:
    """Per term: when it was first seen active, and its master (the nodes' MASTER lines)."""
    seen: dict[int, tuple[float, str]] = {}
    for n in nodes:
        for term, node, t in n.all_masters():
            if term not in seen or t < seen[term][0]:
                seen[term] = (t, node)
    return seen


def _kill_master(c: Cluster, k: int, args: argparse.Namespace) -> dict[str, Any]:
    """SIGKILL the current master, time the takeover, start a replacement and let it settle."""
    term, master, _ = c.latest_master()  # type: ignore[misc]
    victim = next((n for n in c.live if n.node_id == master), None)
    if victim is None:
        raise Stuck(f"kill {k + 1}: master {master} is not a live node: {c.describe()}")
    survivors = [n for n in c.live if n is not victim]
    asked = [len(n.counters) for n in survivors]
    for n in survivors:
        n.proc.send_signal(signal.SIGWINCH)
    if not wait_for(lambda: all(len(n.counters) > a for n, a in zip(survivors, asked, strict=True)), 10):
        raise Stuck(f"kill {k + 1}: no statistics from the survivors: {c.describe()}")
    counters = {n.node_id: n.counters[-1] for n in survivors}
    before = max((t for n in survivors for t in n.all_ack_times()), default=0.0)
    t_kill = time.monotonic()
    victim.kill()
    c.live.remove(victim)
    print(f"  kill {k + 1}/{args.kills}", file=sys.stderr, flush=True)

    def takeovers() -> list[tuple[float, int, str]]:
        return [(t, tm, node) for n in survivors for tm, node, t in n.all_masters() if tm > term]

    if not wait_for(takeovers, 30):
        raise Stuck(f"kill {k + 1}: no new master 30 s after killing {master}: {c.describe()}")
    t_master, new_term, new_master = min(takeovers())
    if not wait_for(lambda: any(t > t_master for n in survivors for t in n.all_ack_times()), 30):
        raise Stuck(f"kill {k + 1}: no ack 30 s after new master {new_master}: {c.describe()}")
    merged = sorted(t for n in survivors for t in n.all_ack_times())
    resumed = min(t for t in merged if t > t_master)
    last_before = max([before, *(t for t in merged if t < t_kill)])
    window = [last_before, *(t for t in merged if t_kill <= t <= resumed)]
    took_over = next(n for n in survivors if n.node_id == new_master)
    if not wait_for(lambda: any(tm == new_term for tm, _, _ in took_over.stats_at), 10):
        raise Stuck(f"kill {k + 1}: no statistics from the new master: {c.describe()}")
    at_takeover = next(st for tm, _, st in took_over.stats_at if tm == new_term)
    sample = {"victim": master, "term": term, "new_master": new_master, "new_term": new_term,
              "moved": _moved(at_takeover) - _moved(counters[new_master]),
              "to_new_master_s": t_master - t_kill, "unavailable_s": _gap(window),
              "kill_to_resumed_s": resumed - t_kill}
    fresh = c.spawn()
    fresh.wait_ready(60)

    def settled() -> bool:
        return len(fresh.acks) >= 5 and all((m := n.current_master()) and m[0] >= new_term for n in c.live)

    if not wait_for(settled, 60):
        raise Stuck(f"kill {k + 1}: the replacement did not get going: {c.describe()}")
    time.sleep(args.cycle)  # let the replacement settle into the election before the next kill
    return sample


def sticky_kills(url: str, args: argparse.Namespace, logdir: Path) -> dict[str, Any]:
    c = Cluster(url, "sticky", args.cycle, args.gap, args, logdir, "sticky")
    result: dict[str, Any] = {"cycle": args.cycle, "gap": args.gap, "kills": [], "error": None}
    try:
        c.start()
        for k in range(args.kills):
            result["kills"].append(_kill_master(c, k, args))
        terms = {k["new_term"] for k in result["kills"]}
        result["moved_at_takeover"] = [k["moved"] for k in result["kills"]]
        history = sorted((term, t, node) for term, (t, node) in _firsts(c.everyone).items())
        result["terms"] = history
        first_kill = result["kills"][0]["term"] if result["kills"] else None
        unforced = [(a, b) for a, b in zip(history, history[1:], strict=False)
                    if first_kill is not None and b[0] > first_kill and b[0] not in terms]
        result["unforced_changes"] = len(unforced)
        result["unforced_moves"] = sum(1 for a, b in unforced if a[2] != b[2])
        result["nodes"] = [(n.node_id, n.started) for n in c.everyone]
        result["unforced_moves_to_newest_node"] = sum(
            1 for a, b in unforced if a[2] != b[2] and b[2] == _newest(c.everyone, b[1]))
        result["longest_ack_gap_s"], result["longest_ack_gap_from"] = _longest_gap(c.everyone)
        result["check"] = c.check()
    except Stuck as e:
        result["error"] = str(e)
        result["check"] = {"ok": False, "error": "not checked: " + str(e), "acked_writes": None}
    finally:
        result["stderr"] = c.stop()
    return result


def _rotate(url: str, args: argparse.Namespace, logdir: Path) -> dict[str, Any]:
    c = Cluster(url, "rotate", args.rotate_cycle, args.rotate_gap, args, logdir, "rotate")
    result: dict[str, Any] = {"cycle": args.rotate_cycle, "gap": args.rotate_gap, "error": None}
    try:
        c.start()
        t_start = time.monotonic()

        def after_start() -> int:
            return sum(1 for t, _ in _firsts(c.live).values() if t > t_start)

        timeout = args.migrations * (args.rotate_cycle + args.rotate_gap) * 6 + 60
        if not wait_for(lambda: after_start() >= args.migrations + 1, timeout, step=0.1):
            raise Stuck(f"rotate: {after_start()} of {args.migrations + 1} migrations in {timeout:.0f} s: "
                        f"{c.describe()}")
        seen = sorted((t, term, node) for term, (t, node) in _firsts(c.live).items())
        before = [s for s in seen if s[0] <= t_start]
        after = [s for s in seen if s[0] > t_start]
        migrations, t_end = after[:args.migrations], after[args.migrations][0]
        acked = sum(len(n.acks_between(t_start, t_end)) for n in c.live)
        merged = sorted(t for n in c.live for t in n.all_ack_times())
        gaps = []
        chain = [*before[-1:], *after[:args.migrations + 1]]  # each migration with its neighbours
        offset = len(chain) - args.migrations - 1
        prev_node = before[-1][2] if before else None
        changed = 0
        for i, (t, _, node) in enumerate(migrations):
            j = i + offset
            lo = (chain[j - 1][0] + t) / 2 if j > 0 else t_start
            hi = (t + chain[j + 1][0]) / 2
            gaps.append(_gap([lo, *(a for a in merged if lo <= a <= hi), hi]))
            changed += node != prev_node
            prev_node = node
        result.update({"window_s": t_end - t_start, "acked": acked, "writes_per_s": acked / (t_end - t_start),
                       "migrations": len(migrations), "master_changed": changed, "unavailable_s": gaps,
                       "masters": len({m[2] for m in migrations})})
        result["moved_at_takeover"] = _moved_at_takeover(c.live, {m[1] for m in migrations})
        result["terms"] = [(term, t, node) for t, term, node in seen]
        result["check"] = c.check()
        stats = [n.dumps[-1]["stats"] for n in c.live if n.dumps]
        result["final_stats"] = stats
        masterships = sum(s["masterships"] for s in stats)
        result["moved_per_mastership"] = sum(_moved(s) for s in stats) / masterships if masterships else None
        result["masterships"] = masterships
    except Stuck as e:
        result["error"] = str(e)
        result["check"] = {"ok": False, "error": "not checked: " + str(e), "acked_writes": None}
    finally:
        result["stderr"] = c.stop()
    return result


def _baseline(url: str, args: argparse.Namespace, logdir: Path, duration: float) -> dict[str, Any]:
    c = Cluster(url, "sticky", args.baseline_cycle, args.baseline_gap, args, logdir, "baseline")
    result: dict[str, Any] = {"cycle": args.baseline_cycle, "gap": args.baseline_gap, "error": None}
    try:
        c.start()
        term = c.latest_master()[0]  # type: ignore[index]
        t_start = time.monotonic()
        time.sleep(duration)
        t_end = time.monotonic()
        acked = sum(len(n.acks_between(t_start, t_end)) for n in c.live)
        history = sorted((tm, t, node) for tm, (t, node) in _firsts(c.live).items())
        during = [h for h in history if h[0] > term]
        moves = sum(1 for a, b in zip(history, history[1:], strict=False) if b[0] > term and b[2] != a[2])
        result.update({"window_s": t_end - t_start, "acked": acked, "writes_per_s": acked / (t_end - t_start),
                       "terms": history, "master_changes_during": len(during), "master_moves_during": moves,
                       "longest_ack_gap_s": _gap(sorted(t for n in c.live for t in n.acks_between(t_start, t_end)))})
        result["check"] = c.check()
    except Stuck as e:
        result["error"] = str(e)
        result["check"] = {"ok": False, "error": "not checked: " + str(e), "acked_writes": None}
    finally:
        result["stderr"] = c.stop()
    return result


def _q(samples: list[float], q: float) -> float | None:
    return nearest_rank(samples, q) if samples else None


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    from broker_mqtt.transport.embedded import EmbeddedBroker

    load = os.getloadavg()
    t0 = time.monotonic()
    if args.trace:
        os.environ["ELECTED_TRACE"] = "1"  # the nodes log their stalls (tests/elected_node.py)
        Path(args.trace).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="failover-") as tmp, EmbeddedBroker() as broker:
        logdir = Path(args.trace or tmp)
        if args.soak:
            print(f"soak: stable master for {args.soak:.0f} s under full write load", file=sys.stderr, flush=True)
            soak = _baseline(broker.url, args, logdir, args.soak)
            return {"soak": soak, "cores": os.cpu_count(), "loadavg_at_start": load, "loadavg_at_end": os.getloadavg(),
                    "elapsed_s": time.monotonic() - t0, "writers_per_node": args.writers,
                    "durability": args.durability, "time": time.time()}
        print(f"sticky: {args.kills} kills, cycle {args.cycle} s, gap {args.gap} s", file=sys.stderr, flush=True)
        sticky = sticky_kills(broker.url, args, logdir)
        print(f"rotate: {args.migrations} migrations, cycle {args.rotate_cycle} s, gap {args.rotate_gap} s",
              file=sys.stderr, flush=True)
        rotate = _rotate(broker.url, args, logdir)
        duration = rotate.get("window_s") or args.migrations * (args.rotate_cycle + args.rotate_gap)
        print(f"baseline: stable master for {duration:.1f} s", file=sys.stderr, flush=True)
        baseline = _baseline(broker.url, args, logdir, duration)
    return {"sticky": sticky, "rotate": rotate, "baseline": baseline, "cores": os.cpu_count(),
            "loadavg_at_start": load, "loadavg_at_end": os.getloadavg(), "elapsed_s": time.monotonic() - t0,
            "writers_per_node": args.writers, "durability": args.durability, "time": time.time()}


def table(res: dict[str, Any]) -> list[dict[str, Any]]:
    s, r, b = res["sticky"], res["rotate"], res["baseline"]
    to_master = [k["to_new_master_s"] for k in s["kills"]]
    s_gap = [k["unavailable_s"] for k in s["kills"]]
    r_gap = r.get("unavailable_s", [])
    bound = s["cycle"] + s["gap"]
    rows: list[dict[str, Any]] = []

    def row(case: str, value: Any, ref: Any = None, ref_case: str = "", unit: str = "") -> None:
        ratio = value / ref if isinstance(value, int | float) and isinstance(ref, int | float) and ref else None
        rows.append({"case": case, "value": value, "unit": unit, "reference": ref, "ratio": ratio,
                     "reference_case": ref_case})

    n = len(s["kills"])
    row(f"sticky: kill -> new master p50 ({n} kills)", _q(to_master, 0.5), bound, "cycle + gap", "s")
    row("sticky: kill -> new master p99", _q(to_master, 0.99), bound, "cycle + gap", "s")
    row("sticky: write unavailability p50", _q(s_gap, 0.5), bound, "cycle + gap", "s")
    row("sticky: write unavailability p99", _q(s_gap, 0.99), bound, "cycle + gap", "s")
    row("sticky: new terms not caused by a kill", s.get("unforced_changes"), unit="terms")
    row("sticky:   of which moved the master", s.get("unforced_moves"), unit="terms")
    row("sticky:   of which to the node started last", s.get("unforced_moves_to_newest_node"), unit="terms")
    row("sticky: longest ack gap in the whole phase", s.get("longest_ack_gap_s"), unit="s")
    moved = s.get("moved_at_takeover", [])
    row("sticky: entries fetched, kill -> master p50", _q(moved, 0.5), unit="recs")
    row("sticky: entries fetched, kill -> master max", max(moved) if moved else None, unit="recs")
    m = r.get("migrations", 0)
    row(f"rotate: acked writes/s ({m} migrations)", r.get("writes_per_s"), b.get("writes_per_s"),
        "stable master (sticky, no kills)", "/s")
    row("baseline: longest ack gap (no kills)", b.get("longest_ack_gap_s"), unit="s")
    row("rotate: write unavailability p50", _q(r_gap, 0.5), r["cycle"] + r["gap"], "cycle + gap", "s")
    row("rotate: write unavailability p99", _q(r_gap, 0.99), r["cycle"] + r["gap"], "cycle + gap", "s")
    row("rotate: data moved/migration (final stats)", r.get("moved_per_mastership"), unit="recs")
    moved = r.get("moved_at_takeover", [])
    row("rotate: entries fetched by new master p50", _q(moved, 0.5), unit="recs")
    row("rotate: entries fetched by new master p99", _q(moved, 0.99), unit="recs")
    for name, phase in (("sticky", s), ("rotate", r), ("baseline", b)):
        ch = phase["check"]
        verdict = ("ok" if ch["ok"] else "FAIL")
        rows.append({"case": f"{name}: acked writes all present, none twice", "value": verdict,
                     "unit": "", "reference": ch.get("acked_writes"), "ratio": None,
                     "reference_case": "acked writes checked" if ch["ok"] else ch["error"][:200]})
    return rows


def print_table(res: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    s, r, b = res["sticky"], res["rotate"], res["baseline"]
    print(f"elected store failover, embedded mosquitto, 3 node processes x {res['writers_per_node']} writers, "
          f"memory backend, durability {res['durability']}")
    print(f"sticky cycle {s['cycle']} s gap {s['gap']} s; rotate cycle {r['cycle']} s gap {r['gap']} s; "
          f"baseline (sticky, no kills) cycle {b['cycle']} s gap {b['gap']} s;"
          f" {res['cores']} cores, load average {res['loadavg_at_start'][0]:.1f} at start, "
          f"{res['loadavg_at_end'][0]:.1f} at end (shared, noisy machine: read the ratios)")
    print(f"{'case':46} {'value':>10} {'unit':>5} {'reference':>10} {'ratio':>6}  reference")

    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, str):
            return v
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}" if isinstance(v, float) else str(v)

    for x in rows:
        ratio = "" if x["ratio"] is None else f"{x['ratio']:.2f}"
        print(f"{x['case']:46} {fmt(x['value']):>10} {x['unit']:>5} {fmt(x['reference']):>10} {ratio:>6}  "
              f"{x['reference_case']}")
    if r.get("migrations"):
        print(f"rotate: {r['migrations']} migrations in {r['window_s']:.1f} s, master node changed in "
              f"{r['master_changed']}, {r['masters']} distinct masters; baseline: {b.get('master_changes_during')}"
              f" new terms ({b.get('master_moves_during')} moved the master) during its {b.get('window_s', 0):.1f} s")
    for name, phase in (("sticky", s), ("rotate", r), ("baseline", b)):
        if phase.get("error"):
            print(f"{name}: ERROR {phase['error']}")
        for line in phase.get("stderr", [])[:5]:
            print(f"{name}: node stderr: {line}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--cycle", type=float, default=1.0, help="sticky phase election cycle (s)")
    p.add_argument("--gap", type=float, default=0.25, help="sticky phase election gap (s)")
    p.add_argument("--migrations", type=int, default=50)
    p.add_argument("--rotate-cycle", type=float, default=0.4)
    p.add_argument("--rotate-gap", type=float, default=0.1)
    p.add_argument("--baseline-cycle", type=float, default=1.0,
                   help="baseline election cycle (s); at 0.4 s a loaded machine moves even a sticky master")
    p.add_argument("--baseline-gap", type=float, default=0.25)
    p.add_argument("--writers", type=int, default=4, help="writes in flight per node")
    p.add_argument("--durability", default="one", choices=["master", "one", "all"])
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "failover.json"))
    p.add_argument("--soak", type=float, default=0.0, metavar="SECONDS",
                   help="only the baseline phase, for SECONDS (issue 20: no unforced term change in 10 minutes)")
    p.add_argument("--trace", default="", metavar="DIR",
                   help="keep each node's stderr in DIR, with its collections, loop stalls and store log lines")
    args = p.parse_args()
    res = orchestrate(args)
    if args.soak:
        b = res["soak"]
        print(f"soak: sticky, no faults, cycle {b['cycle']} s gap {b['gap']} s, {args.writers} writes in flight "
              f"per node, durability {args.durability}; load {res['loadavg_at_start'][0]:.1f} -> "
              f"{res['loadavg_at_end'][0]:.1f}")
        for label, key, fmt in (("window", "window_s", "{:.0f} s"), ("acked writes/s", "writes_per_s", "{:,.0f}"),
                                ("unforced new terms", "master_changes_during", "{}"),
                                ("of which moved the master", "master_moves_during", "{}"),
                                ("longest ack gap", "longest_ack_gap_s", "{:.3f} s")):
            value = b.get(key)
            print(f"  {label:28} {'-' if value is None else fmt.format(value)}")
        print(f"  {'replicas identical, no write lost':28} {b['check']['ok']}")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2))
        print(f"wrote {out}")
        sys.exit(0 if b["check"]["ok"] and not b["error"] else 1)
    rows = table(res)
    print_table(res, rows)
    res["table"] = rows
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")
    if not all(res[k]["check"]["ok"] for k in ("sticky", "rotate", "baseline")):
        sys.exit(1)


if __name__ == "__main__":
    main()
