"""Micro-benchmark of signed PUBLISH payloads (``broker_mqtt.wire.signing``), no broker, one process.

For batches of node messages of about 100 B, 4 KB, 64 KB and 256 KB (the publishers' coalescing
limit; each message ``[i, "test"]`` on one topic, as bench/pubsub.py sends), it times, per batch:

- ``decode_batch`` of the unsigned batch: the baseline, what every receiver does anyway;
- ``seal`` (the publisher's cost) and ``open`` (verify, the receiver's cost) separately;
- ``seal + open`` together, and that plus ``decode_batch``: the whole signed path, as a ratio to
  the baseline.

Best of ``--repeat`` runs of ``--seconds`` each (wall clock, ``time.perf_counter``). Prints a table
and writes bench/results/signing.json. Run: ``python bench/signing.py [--seconds S] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cbor2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker_mqtt.wire.message import NodeEncoder, decode_batch  # noqa: E402 - after the sys.path line
from broker_mqtt.wire.signing import Signer, TrustStore, Verifier, generate_private_key  # noqa: E402

SIZES = {"100 B": 100, "4 KB": 4 * 1024, "64 KB": 64 * 1024, "256 KB": 256 * 1024}
MQTT_TOPIC = "bm/d/bench-publisher/bench/signing"


def make_batch(size: int) -> tuple[bytes, int]:
    """A batch of node messages ``[i, "test"]`` of at most ``size`` bytes (at least one message)."""
    encoder = NodeEncoder(bytes(range(16)))
    parts: list[bytes] = []
    total = 0
    for i in itertools.count():
        part = encoder.encode(0, "/bench/signing", cbor2.dumps([i, "test"]))
        if parts and total + len(part) > size:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts), len(parts)


def rate(fn: Callable[[], object], seconds: float, repeat: int) -> float:
    """Best calls per second over ``repeat`` runs of about ``seconds`` each."""
    best = 0.0
    for _ in range(repeat):
        n, start = 0, time.perf_counter()
        deadline = start + seconds
        while True:
            for _ in range(10):
                fn()
            n += 10
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, n / (now - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "signing.json"))
    args = parser.parse_args()

    key = generate_private_key()
    identity = "bench-publisher"
    rows = []
    for label, size in SIZES.items():
        payload, messages = make_batch(size)
        signer = Signer(key, identity, clock=itertools.count(1).__next__)
        sealed = signer.seal(MQTT_TOPIC, payload)
        verifier = Verifier(TrustStore({identity: key.public_key()}))

        def open_again(sealed: bytes = sealed, verifier: Verifier = verifier) -> bytes:
            # the same batch every time: retained=True accepts an equal counter, so no replay drop
            return verifier.open(MQTT_TOPIC, sealed, sender=identity, retained=True)

        def seal_open(signer: Signer = signer, verifier: Verifier = verifier, payload: bytes = payload) -> bytes:
            return verifier.open(MQTT_TOPIC, signer.seal(MQTT_TOPIC, payload), sender=identity)

        def signed_path(signer: Signer = signer, verifier: Verifier = verifier, payload: bytes = payload) -> object:
            return decode_batch(verifier.open(MQTT_TOPIC, signer.seal(MQTT_TOPIC, payload), sender=identity))

        assert decode_batch(payload)[1] is None and len(decode_batch(payload)[0]) == messages
        decode_rate = rate(lambda payload=payload: decode_batch(payload), args.seconds, args.repeat)
        seal_rate = rate(lambda signer=signer, payload=payload: signer.seal(MQTT_TOPIC, payload),
                         args.seconds, args.repeat)
        open_rate = rate(open_again, args.seconds, args.repeat)
        seal_open_rate = rate(seal_open, args.seconds, args.repeat)
        signed_rate = rate(signed_path, args.seconds, args.repeat)
        rows.append({
            "batch": label, "bytes": len(payload), "messages": messages,
            "decode_batch_per_s": round(decode_rate), "seal_per_s": round(seal_rate), "open_per_s": round(open_rate),
            "seal_open_per_s": round(seal_open_rate), "seal_open_decode_per_s": round(signed_rate),
            "seal_open_vs_decode": round(seal_open_rate / decode_rate, 3),
            "signed_path_vs_decode": round(signed_rate / decode_rate, 3),
            "signed_msgs_per_s": round(signed_rate * messages),
        })

    header = (f"{'batch':>7} {'bytes':>7} {'msgs':>5} {'decode/s':>10} {'seal/s':>8} {'open/s':>8} "
              f"{'seal+open/s':>11} {'+decode/s':>10} {'vs decode':>9} {'signed msg/s':>12}")
    print(header)
    for r in rows:
        print(f"{r['batch']:>7} {r['bytes']:>7} {r['messages']:>5} {r['decode_batch_per_s']:>10,} "
              f"{r['seal_per_s']:>8,} {r['open_per_s']:>8,} {r['seal_open_per_s']:>11,} "
              f"{r['seal_open_decode_per_s']:>10,} {r['signed_path_vs_decode']:>9.3f} {r['signed_msgs_per_s']:>12,}")
    print("vs decode: (seal + open + decode_batch) rate / decode_batch rate, same batch, same run")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "bench": "signing", "python": platform.python_version(), "machine": platform.machine(),
        "seconds": args.seconds, "repeat": args.repeat, "rows": rows,
    }, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
