"""The embedded mosquitto: config, clean stop, clear error when missing, no orphans."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker_mqtt import EmbeddedBroker, MosquittoNotFound, TransportError
from broker_mqtt.transport import embedded as embedded_module

pytestmark = pytest.mark.mosquitto


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited


def test_config_and_clean_stop() -> None:
    broker = EmbeddedBroker()
    with broker:
        text = broker.config_text()
        for line in ("set_tcp_nodelay true", "max_queued_messages 0", f"listener {broker.port} 127.0.0.1"):
            assert line in text
        with socket.create_connection((broker.host, broker.port), 1):
            pass
        pid = broker.pid
        assert pid is not None and _alive(pid)
    assert not _alive(pid)
    with pytest.raises(OSError), socket.create_connection((broker.host, broker.port), 0.5):
        pass


def _reachable(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), 2):
            return True
    except OSError:
        return False


def test_listens_on_127_0_0_1_only_unless_asked_otherwise() -> None:
    """127.0.0.2 is this host too (all of 127/8 is loopback), but not the address the broker binds."""
    with EmbeddedBroker() as local:
        assert f"listener {local.port} 127.0.0.1" in local.config_text()
        assert _reachable("127.0.0.1", local.port)
        assert not _reachable("127.0.0.2", local.port)
    with EmbeddedBroker(host="0.0.0.0") as everywhere:  # noqa: S104 - asked for on purpose
        assert f"listener {everywhere.port} 0.0.0.0" in everywhere.config_text()
        assert everywhere.url == f"mqtt://127.0.0.1:{everywhere.port}"  # a wildcard is no address to reach
        assert _reachable("127.0.0.2", everywhere.port)
    with pytest.raises(ValueError, match="host"):
        EmbeddedBroker(host="")


def test_missing_mosquitto_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(embedded_module.os, "access", lambda path, mode: False)
    with pytest.raises(MosquittoNotFound, match="apt-get install mosquitto"):
        EmbeddedBroker().start()


def test_no_orphan_when_the_parent_is_killed() -> None:
    code = (
        "from broker_mqtt import EmbeddedBroker; import time\n"
        "b = EmbeddedBroker(); b.start(); print(b.pid, flush=True); time.sleep(60)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    parent.stdout.close()
    assert _alive(pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "mosquitto outlived its parent"


def test_ports_are_chosen_outside_the_ephemeral_range() -> None:
    """A restart keeps its port: no outgoing connection can be given it while the broker is down."""
    low, _ = embedded_module._ephemeral_range()
    if low <= embedded_module._PORTS_FROM + 1000:
        pytest.skip(f"no room below this machine's ephemeral range ({low})")
    ports = {embedded_module._free_port() for _ in range(20)}
    assert all(embedded_module._PORTS_FROM <= p < low for p in ports), ports


def test_a_port_taken_before_mosquitto_binds_it_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        chosen = iter([taken])
        real = embedded_module._free_port
        monkeypatch.setattr(embedded_module, "_free_port", lambda: next(chosen, None) or real())
        with EmbeddedBroker() as broker:  # chose the taken port, then another
            assert broker.port != taken
            with socket.create_connection((broker.host, broker.port), 5):
                pass
        with pytest.raises(TransportError, match="Address already in use"):  # a port given is kept
            with EmbeddedBroker(port=taken):
                pass


def test_a_broker_ends_with_the_thread_that_started_it() -> None:
    """Why async code restarts with arestart(), not to_thread.run_sync(restart): PDEATHSIG fires when
    the spawning thread ends, and a worker pool's idle threads end."""
    broker = EmbeddedBroker()
    starter = threading.Thread(target=broker.start)
    starter.start()
    starter.join()
    try:
        pid = broker.pid
        assert pid is not None
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "mosquitto outlived the thread that started it"
    finally:
        broker.cleanup()
