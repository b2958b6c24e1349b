"""``broker-mqtt status``: the report as a pure function of heartbeats, and the command on a live store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from broker_mqtt import EmbeddedBroker
from broker_mqtt.cli.status import StoreSeen, build_report, format_report, observe, problems, store_name
from broker_mqtt.endpoint.events import PeerInfo

CLI = [sys.executable, "-m", "broker_mqtt"]
A, B, C = (uuid.UUID(int=i) for i in (1, 2, 3))
NA, NB, NC = f"{A.hex}.aa", f"{B.hex}.bb", f"{C.hex}.cc"
PEERS = [PeerInfo(A, "gw-a", ("/$store/cfg/e",)), PeerInfo(B, "gw-b", ("/$store/cfg/e",)),
         PeerInfo(C, "gw-c", ("/$store/cfg/e",))]


def hb(node: str, epoch: list | None, role: str, seq: int, master: str | None) -> list:
    return ["hb", node, epoch, role, [seq, epoch], master]


def test_store_name_of_replication_topics() -> None:
    assert store_name("/$store/cfg/e") == "cfg"
    assert store_name("$store/cfg/e") == "cfg"
    assert store_name("/$store/cfg") is None
    assert store_name("/sensors/cfg/e") is None


def test_master_epoch_and_lag_from_heartbeats() -> None:
    stores: dict[str, StoreSeen] = {}
    e1, e2 = [1, NA], [2, NB]
    assert observe(stores, "/$store/cfg/e", hb(NA, e1, "follower", 10, NA), 0.0)
    assert observe(stores, "/$store/cfg/e", hb(NB, e2, "master", 12, NB), 0.1)
    assert observe(stores, "/$store/cfg/e", hb(NC, e2, "follower", 9, NB), 0.2)
    assert not observe(stores, "/$store/cfg/e", ["log", e2, []], 0.3)  # only heartbeats count
    assert not observe(stores, "/$store/cfg/e", ["hb", 1], 0.3)  # malformed: ignored
    assert not observe(stores, "/other", hb(NA, e1, "master", 1, NA), 0.3)
    report = build_report("mqtt://h:1883", "bm", PEERS, stores)
    [cfg] = report["stores"]
    assert (cfg["master"], cfg["master_name"], cfg["term"], cfg["seq"]) == (NB, "gw-b", 2, 12)
    assert [(r["name"], r["role"], r["behind"]) for r in cfg["replicas"]] == [
        ("gw-b", "master", 0), ("gw-a", "follower", 2), ("gw-c", "follower", 3)]
    assert problems(report, 1.0) == []
    text = "\n".join(format_report(report))
    assert "3 peers, 1 elected store" in text
    assert "store cfg: master gw-b  epoch 2  seq 12  3 replicas" in text
    assert "gw-c  follower  epoch 2  seq 9  3 behind" in text
    json.dumps(report)  # JSON-able as it is


def test_followers_name_the_master_while_its_heartbeat_is_in_flight() -> None:
    stores: dict[str, StoreSeen] = {}
    observe(stores, "/$store/cfg/e", hb(NA, [3, NC], "follower", 5, NC), 0.0)
    observe(stores, "/$store/cfg/e", hb(NB, [3, NC], "follower", 5, NC), 0.0)
    [cfg] = build_report("u", "bm", PEERS[:2], stores)["stores"]
    assert (cfg["master"], cfg["master_name"], cfg["term"]) == (NC, None, 3)  # gw-c's presence not seen
    assert "store cfg: master cccc" not in "\n".join(format_report(build_report("u", "bm", PEERS[:2], stores)))


def test_a_master_gone_quiet_while_listening_is_not_the_master() -> None:
    stores: dict[str, StoreSeen] = {}
    observe(stores, "/$store/cfg/e", hb(NA, [1, NA], "master", 5, NA), 0.0)  # then it died
    observe(stores, "/$store/cfg/e", hb(NB, [1, NA], "follower", 5, None), 1.5)
    [cfg] = build_report("u", "bm", PEERS, stores)["stores"]
    assert cfg["master"] is None
    assert [(r["name"], r["silent"]) for r in cfg["replicas"]] == [("gw-a", True), ("gw-b", False)]
    assert "gw-a  master    epoch 1  seq 5  (silent: not heard lately; gone?)" in \
        "\n".join(format_report(build_report("u", "bm", PEERS, stores)))


def test_no_master_and_missing_stores_are_problems() -> None:
    stores: dict[str, StoreSeen] = {}
    observe(stores, "/$store/cfg/e", hb(NA, [1, NA], "claiming", 0, None), 0.0)
    observe(stores, "/$store/cfg/e", hb(NB, None, "follower", 0, None), 0.0)
    report = build_report("u", "ns", PEERS, stores, ("cfg", "nope"))
    assert report["missing"] == ["nope"]
    assert report["stores"][0]["master"] is None
    found = problems(report, 1.5)
    assert any("'nope': no replica heard within 1.5 s in namespace 'ns'" in p for p in found)
    assert any("'cfg' has no active master (2 replicas: 1 claiming, 1 follower)" in p for p in found)
    text = "\n".join(format_report(report))
    assert "master none" in text and "store nope: not heard" in text
    assert build_report("u", "ns", PEERS, stores, ("other",))["stores"] == []  # --store filters


@pytest.mark.mosquitto
def test_status_against_a_live_elected_store(broker: EmbeddedBroker) -> None:
    sys.path.insert(0, str(Path(__file__).parent / "store"))
    from elected_procs import ElectedProc, wait_for

    ns = "clistatus" + uuid.uuid4().hex[:6]
    nodes = [ElectedProc(broker.url, ns, "cfg", "sticky", 1.0, 0.25) for _ in range(2)]
    try:
        ids = [n.wait_ready() for n in nodes]
        assert wait_for(lambda: any(n.current_master() for n in nodes), 20)
        common = ["--broker", broker.url, "--namespace", ns]
        out = subprocess.run([*CLI, "status", *common, "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        [cfg] = report["stores"]
        term, master, _ = next(n.current_master() for n in nodes if n.current_master())
        assert cfg["master"] == master and master in ids
        assert cfg["term"] == term >= 1
        assert sorted(r["node"] for r in cfg["replicas"]) == sorted(ids)
        assert len(report["peers"]) >= 2

        text = subprocess.run([*CLI, "status", *common], capture_output=True, text=True, timeout=60)
        assert text.returncode == 0 and "store cfg: master " in text.stdout and f"epoch {term}" in text.stdout

        # the master dies: a later status reports the new master in a higher epoch
        victim = next(n for n in nodes if n.node_id == master)
        victim.kill()
        survivor = next(n for n in nodes if n is not victim)
        assert wait_for(lambda: (survivor.current_master() or (0,))[0] > term, 30)
        after = json.loads(subprocess.run([*CLI, "status", *common, "--json", "--store", "cfg"],
                                          capture_output=True, text=True, timeout=60).stdout)
        assert after["stores"][0]["master"] == survivor.node_id and after["stores"][0]["term"] > term

        missing = subprocess.run([*CLI, "status", *common, "--store", "nope"], capture_output=True, text=True,
                                 timeout=60)
        assert missing.returncode == 1 and "'nope': no replica heard" in missing.stderr
    finally:
        for n in nodes:
            n.kill()


def test_status_needs_a_broker_and_reports_an_unreachable_one() -> None:
    env = {k: v for k, v in os.environ.items() if k != "BROKER_MQTT_URL"}
    assert subprocess.run([*CLI, "status"], capture_output=True, text=True, timeout=60, env=env).returncode == 2
    out = subprocess.run([*CLI, "status", "--broker", "mqtt://127.0.0.1:1"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 3 and "could not connect" in out.stderr
