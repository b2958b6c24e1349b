"""``broker-mqtt status``: the peers of a namespace and the master and epoch of each elected store.

Theory of operation. ``status`` connects one endpoint (``cli-status``), reads the retained presence
announcements (the peers) and for ``--wait`` seconds listens, passively, to the replication topics of
every elected store: ``/$store/<name>/e``, node messages of kind COMMAND (docs/elected-stores.md).
Every replica of a store broadcasts there a heartbeat at least every 0.25 s,
``["hb", node, epoch, role, position, master]``: its node id (``<endpoint uuid hex>.<random>``), the
epoch it follows (``[term, master node id]``), its role (``follower``, ``claiming`` or ``master``),
its position (``[seq, epoch of that record]``) and the master it follows. From those the store's
state is derived (:func:`store_report`): the highest epoch heard, the node that heartbeats as
``master`` in it (else the master its followers name), each replica's role and how far it is behind.
``status`` never sends on these topics and joins no election: it is not a replica and changes nothing.

Everything but the command itself is a pure function of what was heard (:func:`observe`,
:func:`build_report`, :func:`format_report`, :func:`problems`), so it is tested without a broker.

Exit codes: 0 every store seen has an active master (and every ``--store`` asked for was seen);
1 a store has no active master, or a ``--store`` was not heard at all; 2 usage; 3 broker unreachable
or refused.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
import click

from ..endpoint.endpoint import Endpoint
from ..wire.message import Kind
from .common import (
    EXIT_CHECK_FAILED,
    broker_option,
    cli_endpoint,
    connection_options,
    fail,
    namespace_option,
    run_command,
)

__all__ = ["Heartbeat", "observe", "build_report", "store_report", "format_report", "problems"]

STORE_PREFIX = "/$store"
SILENT_AFTER = 1.0  # seconds: replicas heartbeat at least every 0.25 s


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The latest heartbeat of one replica."""

    node: str
    epoch: tuple[int, str] | None
    role: str
    seq: int
    master: str | None
    at: float


@dataclass(slots=True)
class StoreSeen:
    """What was heard of one elected store: the latest heartbeat per replica."""

    name: str
    replicas: dict[str, Heartbeat] = field(default_factory=dict)


def store_name(topic: str) -> str | None:
    """The store name of a replication topic (``/$store/<name>/e``), else None."""
    levels = topic.strip("/").split("/")
    if len(levels) == 3 and levels[0] == "$store" and levels[2] == "e" and levels[1]:
        return levels[1]
    return None


def _epoch(wire: Any) -> tuple[int, str] | None:
    if (isinstance(wire, (list, tuple)) and len(wire) == 2 and isinstance(wire[0], int)
            and not isinstance(wire[0], bool) and isinstance(wire[1], str)):
        return (wire[0], wire[1])
    return None


def observe(stores: dict[str, StoreSeen], topic: str, data: Any, now: float) -> bool:
    """Record ``data`` if it is a heartbeat on a store's replication topic; True if it was one.

    Every other replication message (claims, log records, acks, ...) and anything malformed is
    ignored: status reports only what replicas say about themselves.
    """
    name = store_name(topic)
    if name is None or not isinstance(data, (list, tuple)) or len(data) < 6 or data[0] != "hb":
        return False
    _, node, epoch, role, pos, master = data[:6]
    if not isinstance(node, str) or not isinstance(role, str):
        return False
    seq = pos[0] if isinstance(pos, (list, tuple)) and pos and isinstance(pos[0], int) else 0
    seen = stores.setdefault(name, StoreSeen(name))
    seen.replicas[node] = Heartbeat(node, _epoch(epoch), role, seq, master if isinstance(master, str) else None, now)
    return True


def _name_of(node: str | None, names: dict[str, str]) -> str | None:
    """The peer name of a store node id (``<endpoint uuid hex>.<random>``), if that peer is known."""
    if node is None:
        return None
    return names.get(node.split(".", 1)[0])


def store_report(seen: StoreSeen, names: dict[str, str]) -> dict[str, Any]:
    """One store's state, JSON-able: master (node id and peer name), epoch, replicas.

    The store's epoch is the highest one any replica reported. Its master is the replica that
    heartbeats as ``master`` in that epoch; failing that (a heartbeat in flight), the master most of
    the replicas in that epoch say they follow; else None (an election or a handover is under way).
    A replica not heard for ``SILENT_AFTER`` seconds before the last heartbeat heard (it died or
    left while status listened) is ``silent`` and does not count.
    """
    latest = max((hb.at for hb in seen.replicas.values()), default=0.0)
    silent = {hb.node for hb in seen.replicas.values() if hb.at < latest - SILENT_AFTER}
    epochs = [hb.epoch for hb in seen.replicas.values() if hb.epoch is not None]
    epoch = max(epochs) if epochs else None
    current = [hb for hb in seen.replicas.values() if hb.epoch == epoch and hb.node not in silent]
    masters = [hb.node for hb in current if hb.role == "master"]
    if masters:
        master: str | None = masters[0]
    else:
        named = Counter(hb.master for hb in current if hb.master is not None)
        master = named.most_common(1)[0][0] if named else None
    master_seq = seen.replicas[master].seq if master in seen.replicas else max(
        (hb.seq for hb in seen.replicas.values()), default=0)
    replicas = [
        {"node": hb.node, "name": _name_of(hb.node, names), "role": hb.role,
         "epoch": list(hb.epoch) if hb.epoch else None, "seq": hb.seq, "behind": max(master_seq - hb.seq, 0),
         "silent": hb.node in silent}
        for hb in sorted(seen.replicas.values(), key=lambda hb: (hb.role != "master", _name_of(hb.node, names) or "",
                                                                  hb.node))
    ]
    return {
        "name": seen.name,
        "master": master,
        "master_name": _name_of(master, names),
        "epoch": list(epoch) if epoch else None,
        "term": epoch[0] if epoch else None,
        "seq": master_seq,
        "replicas": replicas,
    }


def build_report(broker: str, namespace: str, peers: list[Any], stores: dict[str, StoreSeen],
                 wanted: tuple[str, ...] = ()) -> dict[str, Any]:
    """The whole status, JSON-able. ``peers``: :class:`~broker_mqtt.PeerInfo` (or anything with
    ``id``, ``name``, ``topics``). ``wanted``: only these stores (those not heard are listed under
    ``missing``)."""
    names = {p.id.hex: p.name for p in peers}
    shown = [s for n, s in sorted(stores.items()) if not wanted or n in wanted]
    return {
        "broker": broker,
        "namespace": namespace,
        "peers": [{"name": p.name, "id": str(p.id), "topics": list(p.topics)}
                  for p in sorted(peers, key=lambda p: (p.name, str(p.id)))],
        "stores": [store_report(s, names) for s in shown],
        "missing": [n for n in wanted if n not in stores],
    }


def problems(report: dict[str, Any], wait: float) -> list[str]:
    """What a script should not accept, phrased so a person can act on it (empty: all is well)."""
    out = []
    for name in report["missing"]:
        out.append(f"store {name!r}: no replica heard within {wait} s in namespace {report['namespace']!r} "
                   "(a wrong store name or --namespace, or no node of it running)")
    for s in report["stores"]:
        if s["master"] is None:
            roles = Counter(r["role"] for r in s["replicas"])
            out.append(f"store {s['name']!r} has no active master ({_count(len(s['replicas']), 'replica')}: "
                       f"{', '.join(f'{n} {r}' for r, n in sorted(roles.items()))}): an election or handover "
                       "is under way, or no candidate is running; try again, or check the nodes")
    return out


def _short(node: str | None) -> str:
    if node is None:
        return "-"
    return f"{node[:8]}...{node.rsplit('.', 1)[-1]}" if "." in node else node[:8]


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def format_report(report: dict[str, Any]) -> list[str]:
    """The human-readable status, as lines."""
    lines = [f"broker {report['broker']}  namespace {report['namespace']}: "
             f"{_count(len(report['peers']), 'peer')}, {_count(len(report['stores']), 'elected store')}"]
    if report["peers"]:
        lines.append("peers")
        width = max(len(p["name"]) for p in report["peers"])
        for p in report["peers"]:
            lines.append(f"  {p['name']:{width}}  {p['id']}  {' '.join(p['topics'])}".rstrip())
    for s in report["stores"]:
        who = (s["master_name"] or _short(s["master"])) if s["master"] else "none (election or handover under way)"
        lines.append(f"store {s['name']}: master {who}  epoch {s['term'] if s['term'] is not None else '-'}  "
                     f"seq {s['seq']}  {_count(len(s['replicas']), 'replica')}")
        width = max((len(r["name"] or _short(r["node"])) for r in s["replicas"]), default=0)
        for r in s["replicas"]:
            behind = f"  {r['behind']} behind" if r["behind"] else ""
            behind += "  (silent: not heard lately; gone?)" if r["silent"] else ""
            lines.append(f"  {r['name'] or _short(r['node']):{width}}  {r['role']:9} epoch "
                         f"{r['epoch'][0] if r['epoch'] else '-'}  seq {r['seq']}{behind}")
    for name in report["missing"]:
        lines.append(f"store {name}: not heard")
    return lines


@click.command()
@broker_option
@connection_options
@namespace_option
@click.option("--wait", type=click.FloatRange(min=0.1), default=1.5, show_default=True,
              help="Seconds to listen for presence and store heartbeats (replicas send one every 0.25 s).")
@click.option("--store", "stores", multiple=True, metavar="NAME",
              help="Report only this elected store, and fail if it is not heard (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (peers, stores, missing).")
def status(broker: str | None, namespace: str, wait: float, stores: tuple[str, ...], as_json: bool) -> None:
    """Peers, and the master and epoch of every elected store, as seen on the broker.

    Listens without taking part (no replica, no election). Exit code 0 when every store seen has an
    active master, 1 when one has none or a --store was not heard, 3 when the broker is unreachable.
    """
    if broker is None:
        fail("status needs --broker (or BROKER_MQTT_URL)", 2)
    assert broker is not None
    for name in stores:
        if not name or "/" in name or "+" in name or "#" in name:
            fail(f"bad store name {name!r}", 2)

    async def run() -> dict[str, Any]:
        heard: dict[str, StoreSeen] = {}
        async with Endpoint(broker, namespace=namespace, name="cli-status", **cli_endpoint(broker)) as ep:
            async with ep.subscribe(STORE_PREFIX, kind=Kind.COMMAND, buffer=4096) as sub:
                with anyio.move_on_after(wait):
                    async for msg in sub:
                        observe(heard, msg.topic, msg.data, time.monotonic())
            return build_report(broker, namespace, ep.peers(), heard, stores)

    report = run_command(run)
    if as_json:
        click.echo(json.dumps(report))
    else:
        for line in format_report(report):
            click.echo(line)
    if not report["peers"]:
        click.echo(f"broker-mqtt: no peers announced in namespace {namespace!r} (is --namespace right?)", err=True)
    issues = problems(report, wait)
    for issue in issues:
        click.echo(f"broker-mqtt: {issue}", err=True)
    if issues:
        sys.exit(EXIT_CHECK_FAILED)
