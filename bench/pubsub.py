"""Pub/sub throughput and latency on the embedded mosquitto, against a raw aiomqtt baseline.

Every publisher and subscriber is its own OS process; the orchestrator (this script without
``--role``) starts one embedded mosquitto and runs, in one session:

- small messages ``[i, "test"]`` end-to-end, 1 -> 1 and 1 -> 4 subscribers, QoS 1 (the
  default) and QoS 0;
- 1 KB payloads, 1 -> 1;
- Spark-like rows, 1 -> 1: the map bench/spark_emit.py's bridge sends (id, device, value, a UTC
  timestamp, the row id), pre-encoded and flooded with ``publish_encoded`` as the bridge does, so
  the subscriber's receive and decode path is the bottleneck (``--rows-only`` runs just this);
- publish -> receive latency at low load (500 msg/s), p50 / p99;
- the baseline: raw aiomqtt, one PUBLISH per message, QoS 0 (its fastest mode), same payload;
- signed twins of the broker_mqtt cases (``--signed-only`` runs just those and their unsigned
  rows): every endpoint seals each PUBLISH with its Ed25519 key and requires its peers' seals
  (docs/signing.md); the ``x unsigned`` column is the ratio to the same case unsigned, same run
  (with ``--signed-only`` each case runs right next to its signed twin; ``--repeat N`` runs them all
  N times and reports each case's median run).

Throughput is counted from the publisher's first publish to the subscriber's last receive (wall
clock, one host). It prints a table and writes bench/results/pubsub.json. Run: ``make bench`` or
``python bench/pubsub.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from quantile import nearest_rank  # noqa: E402 - bench/ is this script's own directory


# -- roles (each runs in its own process) ---------------------------------------------------------
def _identity(args: argparse.Namespace, client_id: str) -> dict[str, object]:
    """Endpoint keyword arguments: signing with the keys in ``--signed DIR`` (see _make_keys)."""
    if not args.signed:
        return {}
    from broker_mqtt.transport.keyfiles import load_private_key
    from broker_mqtt.wire.signing import TrustStore

    keys = Path(args.signed)
    return {"client_id": client_id, "signing_key": load_private_key(keys / f"{client_id}.pem"),
            "trust": TrustStore.from_toml((keys / "trust.toml").read_text())}


def _make_keys(directory: Path, names: list[str]) -> None:
    from broker_mqtt.transport.keyfiles import save_private_key
    from broker_mqtt.wire.signing import TrustStore, generate_private_key

    trust = TrustStore()
    for name in names:
        key = generate_private_key()
        save_private_key(directory / f"{name}.pem", key)
        trust.add(name, key.public_key())
    (directory / "trust.toml").write_text(trust.to_toml())


async def _sub_role(args: argparse.Namespace) -> dict[str, object]:
    from broker_mqtt import Endpoint

    latencies: list[int] = []
    received = 0
    first = last = 0.0
    ident = _identity(args, args.client)
    async with Endpoint(args.broker, id=uuid.UUID(args.id), name=args.id[:8], **ident) as ep:  # type: ignore[arg-type]
        async with ep.subscribe(args.topic) as sub:
            print("READY", flush=True)
            import anyio

            with anyio.move_on_after(args.timeout):
                async for msg in sub:
                    data = msg.data
                    now = time.time()
                    if received == 0:
                        first = now
                    received += 1
                    last = now
                    if args.latency:
                        latencies.append(time.time_ns() - data[1])
                    if received >= args.count:
                        break
    return {"received": received, "first": first, "last": last, "latencies_ns": latencies}


async def _pub_role(args: argparse.Namespace) -> dict[str, object]:
    import anyio

    from broker_mqtt import Endpoint

    payload_tail: object = "test" if args.size == 0 else "x" * args.size
    async with Endpoint(args.broker, name="publisher", qos=args.qos, **_identity(args, "pub")) as ep:  # type: ignore[arg-type]
        for peer in args.peers.split(","):
            if not await ep.await_peer(uuid.UUID(peer), timeout=10):
                raise SystemExit(f"subscriber {peer} never appeared")
        if args.rows:
            chunks = _row_chunks(args.count)
            start = time.time()
            for chunk in chunks:
                await ep.publish_encoded(args.topic, chunk)
            await ep.flush()
            return {"start": start, "published": args.count, "end": time.time(),
                "publishes": ep.statistics().publishes_sent}
        start = time.time()
        if args.latency:
            for i in range(args.count):
                await ep.publish(args.topic, [i, time.time_ns()])
                await anyio.sleep(1 / args.rate)
        else:
            for i in range(args.count):
                await ep.publish(args.topic, [i, payload_tail])
        await ep.flush()
        return {"start": start, "published": args.count, "end": time.time(),
            "publishes": ep.statistics().publishes_sent}


def _row_chunks(count: int, size: int = 1000) -> list[list[bytes]]:
    """Encoded rows like the Spark bridge's (bench/spark_emit.py), in chunks of ``size``."""
    import datetime as dt

    from broker_mqtt.wire import codec

    job = uuid.uuid4().hex
    utc = dt.UTC
    rows = [codec.encode({"id": i, "device": f"device-{i % 16}", "value": i * 0.25,
                          "ts": dt.datetime.fromtimestamp(1_700_000_000 + i, utc), "$spark": [job, 0, 1, i]})
            for i in range(count)]
    return [rows[i:i + size] for i in range(0, count, size)]


async def _raw_sub_role(args: argparse.Namespace) -> dict[str, object]:
    import aiomqtt
    import anyio

    host, port = args.broker.removeprefix("mqtt://").split(":")
    received = 0
    first = last = 0.0
    opts = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    async with aiomqtt.Client(host, int(port), protocol=aiomqtt.ProtocolVersion.V5, socket_options=opts) as c:
        await c.subscribe(args.topic, qos=0)
        await c.publish(args.topic + "/ready", b"1")
        print("READY", flush=True)
        with anyio.move_on_after(args.timeout):
            async for m in c.messages:
                if m.topic.value.endswith("/ready"):
                    continue
                now = time.time()
                if received == 0:
                    first = now
                received += 1
                last = now
                if received >= args.count:
                    break
    return {"received": received, "first": first, "last": last, "latencies_ns": []}


async def _raw_pub_role(args: argparse.Namespace) -> dict[str, object]:
    import aiomqtt
    import cbor2

    host, port = args.broker.removeprefix("mqtt://").split(":")
    opts = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    async with aiomqtt.Client(host, int(port), protocol=aiomqtt.ProtocolVersion.V5, socket_options=opts) as c:
        start = time.time()
        for i in range(args.count):
            await c.publish(args.topic, cbor2.dumps([i, "test"]), qos=0)
        return {"start": start, "published": args.count, "end": time.time()}


# -- orchestration ------------------------------------------------------------------------------
def _spawn(role: str, **kw: object) -> subprocess.Popen[str]:
    argv = [sys.executable, __file__, "--role", role]
    for k, v in kw.items():
        if v is True:
            argv.append(f"--{k}")
        elif v not in (None, False):
            argv += [f"--{k}", str(v)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)


def _result(proc: subprocess.Popen[str], timeout: float) -> dict[str, object]:
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark process failed ({proc.returncode}): {out[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def run_case(
    broker: str, *, subs: int, count: int, size: int = 0, qos: int = 1, raw: bool = False,
    latency: bool = False, rate: int = 500, rows: bool = False, signed: str | None = None,
) -> dict[str, object]:
    from broker_mqtt.wire.identity import endpoint_id

    topic = f"/bench/{uuid.uuid4().hex[:8]}" if not raw else f"rawbench/{uuid.uuid4().hex[:8]}"
    clients = [f"sub{i}" for i in range(subs)]
    ids = [str(endpoint_id(c)) if signed else str(uuid.uuid4()) for c in clients]
    timeout = 120
    procs = [
        _spawn("raw-sub" if raw else "sub", broker=broker, topic=topic, id=i, client=c, count=count,
               timeout=timeout, latency=latency, signed=signed)
        for i, c in zip(ids, clients, strict=True)
    ]
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"subscriber did not start: {line!r}")
    pub = _spawn("raw-pub" if raw else "pub", broker=broker, topic=topic, count=count, size=size, qos=qos,
                 peers=",".join(ids), latency=latency, rate=rate, rows=rows, signed=signed)
    p_res = _result(pub, timeout + 30)
    s_res = [_result(p, timeout + 30) for p in procs]
    received = sum(int(r["received"]) for r in s_res)  # type: ignore[call-overload]
    last = max(float(r["last"]) for r in s_res)  # type: ignore[arg-type]
    elapsed = last - float(p_res["start"])  # type: ignore[arg-type]
    row: dict[str, object] = {
        "msgs_per_publish": round(count / int(p_res["publishes"])) if p_res.get("publishes") else None,  # type: ignore[call-overload]
        "received": received,
        "expected": count * subs,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(received / elapsed) if elapsed > 0 else 0,
    }
    if latency:
        lat = sorted(x for r in s_res for x in r["latencies_ns"])  # type: ignore[attr-defined]
        row["p50_ms"] = round(statistics.median(lat) / 1e6, 3)
        row["p99_ms"] = round(nearest_rank(lat, 0.99) / 1e6, 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role")
    parser.add_argument("--broker")
    parser.add_argument("--topic")
    parser.add_argument("--id")
    parser.add_argument("--peers")
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--qos", type=int, default=1)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--latency", action="store_true")
    parser.add_argument("--rows", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--signed", help=argparse.SUPPRESS)  # a role: the key directory
    parser.add_argument("--signed-only", action="store_true", help="only the signed cases and their unsigned twins")
    parser.add_argument("--rows-only", action="store_true", help="only the Spark-like rows case")
    parser.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    parser.add_argument("--repeat", type=int, default=1, help="run every case this many times; report the median")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "pubsub.json"))
    args = parser.parse_args()
    if args.role:
        import anyio

        role = {"sub": _sub_role, "pub": _pub_role, "raw-sub": _raw_sub_role, "raw-pub": _raw_pub_role}
        result = anyio.run(role[args.role], args)
        print(json.dumps(result), flush=True)
        return

    import tempfile

    from broker_mqtt import EmbeddedBroker

    scale = 10 if args.quick else 1
    rows: dict[str, dict[str, object]] = {}
    keydir = tempfile.mkdtemp(prefix="bench-keys-")
    _make_keys(Path(keydir), ["pub", "sub0", "sub1", "sub2", "sub3"])
    with EmbeddedBroker() as broker:
        url = broker.url
        cases: list[tuple[str, dict[str, object]]] = [
            ("raw aiomqtt 1->1 small (QoS 0, baseline)", {"subs": 1, "count": 30_000 // scale, "raw": True}),
            ("broker_mqtt 1->1 small (QoS 1)", {"subs": 1, "count": 500_000 // scale}),
            ("broker_mqtt 1->1 small (QoS 0)", {"subs": 1, "count": 500_000 // scale, "qos": 0}),
            ("broker_mqtt 1->4 small (QoS 1)", {"subs": 4, "count": 200_000 // scale}),
            ("broker_mqtt 1->1 1 KB (QoS 1)", {"subs": 1, "count": 100_000 // scale, "size": 1024}),
            ("broker_mqtt 1->1 Spark-like rows (QoS 1)", {"subs": 1, "count": 300_000 // scale, "rows": True}),
            ("broker_mqtt latency 500 msg/s (QoS 1)", {"subs": 1, "count": 2_000 // scale, "latency": True}),
        ]
        signed = [(label.replace(" (QoS 1)", " (QoS 1, signed)"), {**kw, "signed": keydir})
                  for label, kw in cases[1:] if kw.get("qos", 1) == 1]
        if args.rows_only:
            cases = [cases[0], *(c for c in cases if c[1].get("rows"))]
        elif args.signed_only:  # each case next to its signed twin, so that both see the same load
            unsigned = [c for c in cases[1:] if c[1].get("qos", 1) == 1]
            cases = [cases[0], *(c for pair in zip(unsigned, signed, strict=True) for c in pair)]
        else:
            cases += signed
        runs: dict[str, list[dict[str, object]]] = {}
        for _ in range(args.repeat):
            for label, kw in cases:
                runs.setdefault(label, []).append(run_case(url, **kw))  # type: ignore[arg-type]
                print(f"  done: {label}", file=sys.stderr, flush=True)
        for label, results in runs.items():  # the run of median throughput
            rows[label] = sorted(results, key=lambda r: float(r["msgs_per_s"]))[len(results) // 2]  # type: ignore[arg-type]
    base = float(rows[cases[0][0]]["msgs_per_s"])  # type: ignore[arg-type]
    for row in rows.values():
        row["x_baseline"] = round(float(row["msgs_per_s"]) / base, 1) if base else None  # type: ignore[arg-type]
    for label, row in rows.items():
        twin = rows.get(label.replace(" (QoS 1, signed)", " (QoS 1)"))
        if twin is not None and twin is not row and float(twin["msgs_per_s"]):  # type: ignore[arg-type]
            row["x_unsigned"] = round(float(row["msgs_per_s"]) / float(twin["msgs_per_s"]), 2)  # type: ignore[arg-type]

    print(f"\nbroker_mqtt pub/sub benchmark ({os.cpu_count()} cores, embedded mosquitto, separate processes)")
    print(f"{'case':52} {'received':>17} {'msg/s':>10} {'x raw':>7} {'x unsigned':>10} {'msg/PUB':>8} {'p50 ms':>8} "
          f"{'p99 ms':>8}")
    for label, row in rows.items():
        got = f"{row['received']}/{row['expected']}"
        print(
            f"{label:52} {got:>17} {row['msgs_per_s']:>10} {row['x_baseline'] or '':>7} "
            f"{row.get('x_unsigned', ''):>10} {row.get('msgs_per_publish') or '':>8} {row.get('p50_ms', ''):>8} "
            f"{row.get('p99_ms', ''):>8}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cases": rows, "cores": os.cpu_count(), "time": time.time()}, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
