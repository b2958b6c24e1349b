"""Prometheus metrics (broker_mqtt/metrics.py, ``broker-mqtt node --metrics-port``) and JSON logs
(broker_mqtt/cli/logs.py): scraped over HTTP from a real node process on mosquitto, and from a
collector on the in-memory broker."""

from __future__ import annotations

import json
import logging
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker_mqtt import EmbeddedBroker, Endpoint, EndpointStatistics
from broker_mqtt.cli.logs import JSONFormatter
from broker_mqtt.metrics import ENDPOINT_COUNTERS, node_registry, open_metrics_listener, serve_metrics
from broker_mqtt.queue.attached import attach_queue
from broker_mqtt.store.elected_attach import attach_store
from broker_mqtt.transport.memory import MemoryConnector
from broker_mqtt.transport.memory_broker import MemoryBroker

CLI = [sys.executable, "-m", "broker_mqtt"]
ELECTION = {"cycle": 1.0, "gap": 0.25}
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

#: a metric family name (as the parser reports it: counters without ``_total``) -> its samples,
#: each ``(labels, value)``; and the family's type
Scrape = dict[str, tuple[str, list[tuple[dict[str, str], float]]]]


def parse(text: str) -> Scrape:
    out: Scrape = {}
    for family in text_string_to_metric_families(text):
        samples = [(dict(s.labels), s.value) for s in family.samples if not s.name.endswith("_created")]
        out[family.name] = (family.type, samples)
    return out


def value(scrape: Scrape, name: str, **labels: str) -> float | None:
    """The value of the sample of ``name`` whose labels include ``labels`` (None: no such sample)."""
    for sample_labels, v in scrape.get(name, ("", []))[1]:
        if all(sample_labels.get(k) == want for k, want in labels.items()):
            return v
    return None


def scrape(port: int, path: str = "/metrics") -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return parse(response.read().decode())


def scrape_until(port: int, done: Callable[[Scrape], bool], timeout: float = 30, proc: Any = None) -> Scrape:
    """Scrape until ``done(scrape)``; fail after ``timeout`` seconds (or when ``proc`` exits)."""
    deadline = time.monotonic() + timeout
    last: Scrape = {}
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the node exited with {proc.returncode}")
        try:
            last = scrape(port)
        except (urllib.error.URLError, ConnectionError):
            last = {}
        if last and done(last):
            return last
        time.sleep(0.1)
    pytest.fail(f"not seen within {timeout} s; last scrape: {sorted(last)}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- a real node on mosquitto ----------------------------------------------------------------------------


@pytest.mark.mosquitto
def test_node_serves_metrics_that_move_and_logs_json(broker: EmbeddedBroker, namespace: str, tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text(f'broker = "{broker.url}"\nnamespace = "{namespace}"\n'
                      '[[store]]\nname = "cfg"\ndurability = "master"\nelection = { cycle = 1.0, gap = 0.25 }\n'
                      '[[queue]]\nname = "jobs"\ndurability = "master"\nelection = { cycle = 1.0, gap = 0.25 }\n')
    port = free_port()
    with (tmp_path / "stdout").open("w") as out, (tmp_path / "stderr").open("w") as err:
        proc = subprocess.Popen([*CLI, "node", "--config", str(config), "--name", "m1", "--metrics-port", str(port),
                                 "--log-format", "json"], stdout=out, stderr=err, text=True)
    try:
        first = scrape_until(port, lambda s: value(s, "broker_mqtt_store_role", store="queue-jobs", role="master") == 1
                             and value(s, "broker_mqtt_store_role", store="cfg", role="master") == 1, proc=proc)
        # names, types and labels
        for name, _ in ENDPOINT_COUNTERS.values():
            assert first[name][0] == "counter", name
            assert value(first, name, endpoint="m1") is not None, name
        assert value(first, "broker_mqtt_endpoint_messages_missed", endpoint="m1") == 0
        for name in ("broker_mqtt_endpoint_connected", "broker_mqtt_endpoint_peers",
                     "broker_mqtt_endpoint_messages_pending"):
            assert first[name][0] == "gauge", name
        assert value(first, "broker_mqtt_endpoint_connected", endpoint="m1") == 1
        assert value(first, "broker_mqtt_store_role", store="cfg", role="follower") == 0
        assert (value(first, "broker_mqtt_store_epoch_term", store="cfg") or 0) >= 1
        assert value(first, "broker_mqtt_store_replica_lag_records", store="cfg") == 0
        assert value(first, "broker_mqtt_election_tag_held", store="cfg") == 1
        assert first["broker_mqtt_store_masterships"][0] == "counter"
        assert value(first, "broker_mqtt_store_masterships", store="queue-jobs") == 1
        assert first["broker_mqtt_queue_ready_messages"] == ("gauge", [({"endpoint": "m1", "queue": "jobs"}, 0.0)])
        assert value(first, "broker_mqtt_queue_dead_letters", queue="jobs") == 0
        assert "process_resident_memory_bytes" in first or sys.platform != "linux"
        every_label = {k for _, samples in first.values() for labels, _ in samples for k in labels}
        assert every_label <= {"endpoint", "store", "queue", "role", "outcome", "version",
                               "generation", "implementation", "major", "minor", "patchlevel"}

        # values move: three messages published to the node's queue arrive and wait there
        received = value(first, "broker_mqtt_endpoint_messages_received", endpoint="m1")
        assert received is not None
        pub = subprocess.run([*CLI, "queue", "publish", "--broker", broker.url, "--namespace", namespace,
                              "jobs", "a", "b", "c"], capture_output=True, text=True, timeout=60)
        assert pub.returncode == 0, pub.stderr
        moved = scrape_until(port, lambda s: value(s, "broker_mqtt_queue_ready_messages", queue="jobs") == 3, proc=proc)
        assert (value(moved, "broker_mqtt_endpoint_messages_received", endpoint="m1") or 0) > received
        assert (value(moved, "broker_mqtt_store_records_applied", store="queue-jobs") or 0) \
            > (value(first, "broker_mqtt_store_records_applied", store="queue-jobs") or 0)
        assert (value(moved, "broker_mqtt_endpoint_peers", endpoint="m1") or 0) >= 0

        with pytest.raises(urllib.error.HTTPError) as missing:
            scrape(port, "/elsewhere")
        assert missing.value.code == 404
        missing.value.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0
    lines = [line for line in (tmp_path / "stderr").read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert records and all(set(r) >= {"time", "level", "logger", "message"} for r in records)
    assert all(RFC3339_UTC.match(r["time"]) for r in records), records[0]
    messages = [r["message"] for r in records if r["logger"] == "broker_mqtt.node"]
    assert f"metrics on http://127.0.0.1:{port}/metrics" in messages
    assert "left" in messages and all(r["level"] == "INFO" for r in records if r["logger"] == "broker_mqtt.node")
    assert (tmp_path / "stdout").read_text() == ""  # json: the event lines are log records, not text on stdout


def test_metrics_port_without_prometheus_client_names_the_extra() -> None:
    code = ("import sys; sys.modules['prometheus_client'] = None; "
            "from broker_mqtt.cli.main import main; main()")
    out = subprocess.run([sys.executable, "-c", code, "node", "--broker", "mqtt://127.0.0.1:1", "--store", "s",
                          "--metrics-port", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "prometheus_client" in out.stderr and "broker-mqtt[metrics]" in out.stderr
    assert "Traceback" not in out.stderr


def test_metrics_port_in_use_fails_before_connecting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([*CLI, "node", "--broker", "mqtt://127.0.0.1:1", "--store", "s", "--metrics-port",
                              str(port)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr


# -- the collector on the in-memory broker ---------------------------------------------------------------


@pytest.mark.anyio
async def test_collector_reads_the_live_counters_and_serves_them() -> None:
    memory = MemoryBroker()
    async with Endpoint(connector=MemoryConnector(memory), namespace="m", name="a") as ep:
        store = await attach_store(ep, "cfg", election=ELECTION, durability="master")
        queue = await attach_queue(ep, "jobs", election=ELECTION, durability="master")
        registry, collector = node_registry(ep, [store], [queue], process=False)
        before = parse(generate_latest(registry).decode())
        assert value(before, "broker_mqtt_queue_ready_messages", queue="jobs") == 0
        assert await store.await_master(10) and await queue.await_master(10)
        await store.put("k", 1)
        await queue.publish("job")
        ready = parse(generate_latest(registry).decode())
        assert value(ready, "broker_mqtt_queue_ready_messages", queue="jobs") == 1
        listener, port = await open_metrics_listener("127.0.0.1", 0)
        async with anyio.create_task_group() as tg, queue.consume() as deliveries:
            tg.start_soon(serve_metrics, registry, listener)
            with anyio.fail_after(30):
                first = await deliveries.__anext__()
                await first.release()
                again = await deliveries.__anext__()  # held: in flight, delivered twice
                assert again.delivery_count == 2
                after = await anyio.to_thread.run_sync(scrape, port)
                await again.accept()
            tg.cancel_scope.cancel()
        assert value(after, "broker_mqtt_store_role", endpoint="a", store="cfg", role="master") == 1
        assert value(after, "broker_mqtt_store_role", store="queue-jobs", role="master") == 1  # the queue's store
        assert value(after, "broker_mqtt_store_keys", store="cfg") == 1
        assert value(after, "broker_mqtt_store_log_sequence", store="cfg") == 1
        assert value(after, "broker_mqtt_queue_ready_messages", queue="jobs") == 0
        assert value(after, "broker_mqtt_queue_in_flight_messages", queue="jobs") == 1
        assert value(after, "broker_mqtt_queue_redeliveries", queue="jobs") == 1
        assert value(after, "broker_mqtt_election_tag_held", store="cfg") == 1
        assert after["broker_mqtt_election_collisions"][0] == "counter"
        assert value(after, "broker_mqtt_endpoint_messages_published", endpoint="a") \
            > (value(before, "broker_mqtt_endpoint_messages_published", endpoint="a") or 0)
        assert "process_resident_memory_bytes" not in after
        samples = {name + ("_total" if kind == "counter" else "_info" if kind == "info" else "")
                   for name, (kind, _) in after.items()}
        assert samples - documented_metrics() == set()  # docs/operations.md lists every metric
        # a store added later is scraped too
        other = await attach_store(ep, "late", election=ELECTION, durability="master")
        collector.add_store(other)
        assert value(parse(generate_latest(registry).decode()), "broker_mqtt_store_keys", store="late") == 0
    closed = parse(generate_latest(registry).decode())  # closed handles still answer
    assert value(closed, "broker_mqtt_endpoint_connected", endpoint="a") == 0


DOCS = Path(__file__).resolve().parent.parent / "docs"


def documented_metrics() -> set[str]:
    """The metric names in the table of docs/operations.md's Metrics section."""
    text = (DOCS / "operations.md").read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(broker_mqtt_[a-z0-9_]+)", text, re.MULTILINE))


def test_every_metric_is_documented_and_the_dashboard_uses_only_those() -> None:
    documented = documented_metrics()
    assert len(documented) > 40
    exported = {f"{name}_total" for name, _ in ENDPOINT_COUNTERS.values()}
    assert exported <= documented
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    assert {"type": "datasource", "query": "prometheus"}.items() <= dashboard["templating"]["list"][0].items()
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs and all(t["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"]
                         for t in p.get("targets", []))
    used = {name for expr in exprs for name in re.findall(r"broker_mqtt_[a-z0-9_]+", expr)}
    assert used - documented == set()
    for needed in ("messages_received_total", "messages_published_total", "malformed_messages_total",
                   "forged_messages_total", "bad_signatures_total", "publishes_rejected_total", "messages_missed_total",
                   "reconnects_total", "connected"):
        assert f"broker_mqtt_endpoint_{needed}" in used, needed
    assert {"broker_mqtt_store_role", "broker_mqtt_store_epoch_term", "broker_mqtt_queue_ready_messages"} <= used
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(set(ids)) == len(ids)


def test_every_endpoint_counter_is_exported() -> None:
    """A counter added to EndpointStatistics needs a metric name (pending is a gauge)."""
    assert set(EndpointStatistics.__slots__) - {"pending"} == set(ENDPOINT_COUNTERS)
    names = [name for name, _ in ENDPOINT_COUNTERS.values()]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"broker_mqtt_endpoint_[a-z0-9_]+", n) and not n.endswith("_total") for n in names)


# -- JSON logs -------------------------------------------------------------------------------------------


def test_json_log_lines_carry_time_level_logger_message_and_exception() -> None:
    formatter = JSONFormatter()
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        record = logging.getLogger("broker_mqtt.test").makeRecord(
            "broker_mqtt.test", logging.ERROR, __file__, 1, "failed on %s \"quoted\"\nnext", ("x",), sys.exc_info())
    line = formatter.format(record)
    assert "\n" not in line
    got = json.loads(line)
    assert got["level"] == "ERROR" and got["logger"] == "broker_mqtt.test"
    assert got["message"] == 'failed on x "quoted"\nnext'
    assert RFC3339_UTC.match(got["time"])
    assert "ZeroDivisionError" in got["exception"] and "Traceback" in got["exception"]
    plain = json.loads(formatter.format(logging.makeLogRecord({"msg": "hi", "levelname": "INFO", "name": "x"})))
    assert plain["message"] == "hi" and "exception" not in plain
