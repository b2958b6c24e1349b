"""The broker-mqtt command line, run as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from broker_mqtt import EmbeddedBroker

pytestmark = pytest.mark.mosquitto

CLI = [sys.executable, "-m", "broker_mqtt"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_help_everywhere() -> None:
    for cmd in ([], ["demo"], ["pub"], ["sub"], ["store"], ["store", "get"], ["node"], ["peers"], ["status"],
                ["bench"], ["queue"], ["queue", "consume"]):
        out = run(*cmd, "--help")
        assert out.returncode == 0 and "Usage" in out.stdout


def test_demo_shows_peers_and_a_real_kill() -> None:
    """Not a terminal: plain log lines. With pyspark (and java) here, the Spark job runs too."""
    from broker_mqtt.cli.demo_spark import spark_unavailable

    out = run("demo", "--duration", "3", timeout=110)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "\x1b[" not in out.stdout  # no live view when stdout is not a terminal
    assert "PeerLost" in out.stdout and "PeerRemoved" in out.stdout
    assert out.stdout.count("store master is now") >= 2  # one before the kill, another after it
    assert "(MISSING)" not in out.stdout
    assert "result: OK" in out.stdout
    if spark_unavailable() is None:
        assert "spark: job done, 8 rows put into store 'demo' and acknowledged" in out.stdout
        assert "spark job: 8 of 8 aggregates of 10000 readings written through the bridge; in the store 8, " \
               "values as computed" in out.stdout
    else:
        assert "spark: skipped" in out.stdout


def test_pub_sub_round_trip(broker: EmbeddedBroker) -> None:
    sub = subprocess.Popen([*CLI, "sub", "--broker", broker.url, "--namespace", "clitest", "--json",
                            "--count", "1", "/cli"], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while sub.poll() is None and time.monotonic() < deadline:
            assert run("pub", "--broker", broker.url, "--namespace", "clitest", "/cli/x", '{"n": 1}').returncode == 0
            try:
                out, _ = sub.communicate(timeout=1)
                break
            except subprocess.TimeoutExpired:
                continue
        assert sub.returncode == 0
        assert json.loads(out.strip().splitlines()[0])["data"] == {"n": 1}
    finally:
        sub.kill()
        sub.wait()
        if sub.stdout:
            sub.stdout.close()


def test_unreachable_broker_exit_code() -> None:
    out = run("pub", "--broker", "mqtt://127.0.0.1:1", "/x", "1", timeout=60)
    assert out.returncode == 3
    assert "could not connect" in out.stderr


def test_usage_errors() -> None:
    assert run("pub", "--broker", "mqtt://127.0.0.1:1", "/x/#", "1").returncode == 2
    assert run("pub", "--broker", "mqtt://127.0.0.1:1", "/x", "{not json").returncode == 2


def test_store_put_get_keys_and_errors(broker: EmbeddedBroker) -> None:
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent / "store"))
    from elected_procs import ElectedProc, wait_for

    ns = "clistore"
    nodes = [ElectedProc(broker.url, ns, "cfg", "sticky", 1.0, 0.25) for _ in range(2)]
    try:
        for n in nodes:
            n.wait_ready()
        assert wait_for(lambda: any(n.current_master() for n in nodes), 20)
        common = ["--broker", broker.url, "--namespace", ns]
        put = run("store", "put", *common, "cfg", "fan", '{"speed": 3}')
        assert put.returncode == 0, put.stderr
        got = run("store", "get", *common, "cfg", "fan")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout) == {"speed": 3}
        keys = run("store", "keys", *common, "cfg")
        assert [json.loads(line) for line in keys.stdout.splitlines()] == ["fan"]
        missing = run("store", "get", *common, "cfg", "nope")
        assert missing.returncode == 1 and "no such key" in missing.stderr
        nobody = run("store", "get", *common, "--timeout", "2", "other-store", "fan")
        assert nobody.returncode == 1 and "no master" in nobody.stderr
        listed = run("peers", *common, "--json")
        assert len([json.loads(line) for line in listed.stdout.splitlines()]) >= 2
    finally:
        for n in nodes:
            n.kill()


def test_node_from_a_toml_file_serves_a_store_and_hands_over_on_sigterm(broker: EmbeddedBroker,
                                                                        tmp_path: Any) -> None:
    import signal

    ns = "clinode"
    config = tmp_path / "node.toml"
    config.write_text(f'broker = "{broker.url}"\nnamespace = "{ns}"\n\n[[store]]\nname = "fleet"\n'
                      f'backend = "sqlite"\npath = "{tmp_path / "fleet-%s.db"}"\n'
                      'election = {{ cycle = 1.0, gap = 0.25 }}\n'.replace("{{", "{").replace("}}", "}"))
    procs = []
    try:
        for i in range(3):  # after one leaves, two replicas still confirm writes (durability "one")
            text = config.read_text().replace("%s", str(i))
            path = tmp_path / f"node{i}.toml"
            path.write_text(text)
            procs.append(subprocess.Popen([*CLI, "node", "--config", str(path), "--name", f"n{i}"],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        common = ["--broker", broker.url, "--namespace", ns]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if run("store", "put", *common, "--timeout", "3", "fleet", "fan", "3").returncode == 0:
                break
        assert json.loads(run("store", "get", *common, "fleet", "fan").stdout) == 3
        procs[0].send_signal(signal.SIGTERM)
        out, err = procs[0].communicate(timeout=30)
        assert procs[0].returncode == 0, err
        assert "handing over and leaving" in out and "left" in out
        put = run("store", "put", *common, "fleet", "fan", "4")  # the other node is (or becomes) master
        assert put.returncode == 0, put.stderr
        assert json.loads(run("store", "get", *common, "fleet", "fan").stdout) == 4
        bad = subprocess.run([*CLI, "node", "--broker", broker.url], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "at least one store" in bad.stderr
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


def test_bench_lists_the_benchmarks_that_exist() -> None:
    out = run("bench", "--list")
    assert out.returncode == 0
    from pathlib import Path

    bench = Path(__file__).resolve().parent.parent / "bench"
    for line in out.stdout.splitlines():
        assert (bench / line.split()[1].removeprefix("bench/")).exists(), line
    assert run("bench", "nonsense").returncode == 2


@pytest.mark.mosquitto
def test_node_with_an_unreadable_store_file_fails_with_a_message(broker: EmbeddedBroker, tmp_path: Any) -> None:
    bad = tmp_path / "not-a-store.db"
    bad.write_bytes(b"this is not an SQLite database" * 100)
    config = tmp_path / "node.toml"
    config.write_text(f'broker = "{broker.url}"\n\n[[store]]\nname = "s"\nbackend = "sqlite"\npath = "{bad}"\n')
    out = run("node", "--config", str(config))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "broker-mqtt: store 's':" in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.mosquitto
def test_node_reconnect_max_is_checked(broker: EmbeddedBroker, tmp_path: Any) -> None:
    config = tmp_path / "node.toml"
    config.write_text(f'broker = "{broker.url}"\nreconnect_max = "soon"\n\n[[store]]\nname = "s"\n')
    out = run("node", "--config", str(config))
    assert out.returncode == 2 and "reconnect_max must be a number" in out.stderr, out.stderr
    flag = run("node", "--config", str(config), "--reconnect-max", "0.01")
    assert flag.returncode == 2 and "--reconnect-max" in flag.stderr, flag.stderr
