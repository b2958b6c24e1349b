"""``broker-mqtt queue publish|consume|dead-letters`` and ``node --queue``, as real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_mqtt import EmbeddedBroker

pytestmark = pytest.mark.mosquitto

CLI = [sys.executable, "-m", "broker_mqtt"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_queue_publish_consume_and_dead_letters_against_two_nodes(broker: EmbeddedBroker, tmp_path: Path) -> None:
    ns = "cliqueue"
    config = tmp_path / "node.toml"
    config.write_text(f'broker = "{broker.url}"\nnamespace = "{ns}"\n\n[[queue]]\nname = "jobs"\n'
                      "max_deliveries = 3\nelection = { cycle = 1.0, gap = 0.25 }\n")
    # two replicas: with durability "one" a write needs another replica's confirmation
    nodes = [subprocess.Popen([*CLI, "node", "--config", str(config), "--name", f"q{i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    common = ["--broker", broker.url, "--namespace", ns]
    try:
        deadline = time.monotonic() + 30
        while True:
            pub = run("queue", "publish", *common, "--timeout", "3", "jobs", '{"job": 1}', '{"job": 2}', "three")
            if pub.returncode == 0 or time.monotonic() > deadline:
                break
        assert pub.returncode == 0, pub.stderr
        ids = [int(line) for line in pub.stdout.split()]
        assert len(ids) == 3 and ids == list(range(ids[0], ids[0] + 3))

        got = run("queue", "consume", *common, "--json", "--count", "2", "jobs")
        assert got.returncode == 0, got.stderr
        first = [json.loads(line) for line in got.stdout.splitlines()]
        assert [(m["id"], m["data"], m["delivery_count"]) for m in first] == \
            [(ids[0], {"job": 1}, 1), (ids[1], {"job": 2}, 1)]  # FIFO, accepted

        rejected = run("queue", "consume", *common, "--json", "--count", "1", "--settle", "reject", "jobs")
        assert rejected.returncode == 0, rejected.stderr
        assert json.loads(rejected.stdout)["data"] == "three"

        dead = run("queue", "dead-letters", *common, "--json", "jobs")
        assert dead.returncode == 0, dead.stderr
        (letter,) = [json.loads(line) for line in dead.stdout.splitlines()]
        assert letter["id"] == ids[2] and letter["data"] == "three" and "rejected" in letter["reason"]

        nobody = run("queue", "publish", *common, "--timeout", "2", "other", "x")
        assert nobody.returncode == 1 and "no master of queue 'other'" in nobody.stderr
        assert run("queue", "publish", "jobs", "x").returncode == 2  # no --broker
    finally:
        for p in nodes:
            p.kill()
            p.communicate()
