"""``broker-mqtt sub --raw`` / ``pub --raw``: plain MQTT topics, checked against a plain aiomqtt
client on a real mosquitto (the CLI runs as a subprocess)."""

from __future__ import annotations

import base64
import json
import os
import re
import select
import subprocess
import sys
import time
import uuid

import aiomqtt
import anyio
import pytest

from broker_mqtt import EmbeddedBroker
from broker_mqtt.cli.raw import format_json, format_line, payload_text, validate_filter, validate_raw_topic
from broker_mqtt.endpoint.subscription import RawMessage
from broker_mqtt.errors import UsageError

CLI = [sys.executable, "-m", "broker_mqtt"]
UNREACHABLE = "mqtt://127.0.0.1:1"
JSON_PAYLOAD = b'{"temp": 21.5, "unit": "\xc2\xb0C"}'
BINARY_PAYLOAD = b"\x00\x01\xfe\xff"


def run(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, timeout=timeout)


def client(broker: EmbeddedBroker) -> aiomqtt.Client:
    return aiomqtt.Client(broker.host, broker.port, identifier="plain-" + uuid.uuid4().hex[:8],
                          protocol=aiomqtt.ProtocolVersion.V5)


def wait_for_stderr(proc: subprocess.Popen[bytes], text: bytes, timeout: float = 20) -> bytes:
    """Read proc's stderr until ``text`` shows up (or the process ends, or ``timeout``)."""
    assert proc.stderr is not None
    seen, deadline = b"", time.monotonic() + timeout
    fd = proc.stderr.fileno()
    while text not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} on stderr in {timeout}s: {seen!r}"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 4096)
            assert chunk, f"stderr closed before {text!r}: {seen!r}"
            seen += chunk
    return seen


# -- formatting and validation, no broker ---------------------------------------------------------
def test_filters_follow_mqtt_rules() -> None:
    for good in ("site1/+/telemetry", "#", "+", "a/#", "+/+/#", "/", "$SYS/#", "a//b"):
        assert validate_filter(good) == good
    for bad, why in (("", "empty"), ("a/#/b", "'#'"), ("a/b#", "'#'"), ("#/a", "'#'"), ("a+/b", "'+'"),
                     ("a/+b", "'+'"), ("a\0b", "NUL"), ("a" * 65536, "65535")):
        with pytest.raises(UsageError, match=re.escape(why)):
            validate_filter(bad)


def test_publish_topics_have_no_wildcards() -> None:
    assert validate_raw_topic("site1/dev1/cmnd") == "site1/dev1/cmnd"
    assert validate_raw_topic("é" * 32767) == "é" * 32767  # 65534 bytes in UTF-8
    for bad, why in (("", "empty"), ("a/+", "wildcard"), ("a/#", "wildcard"), ("a\0", "NUL"),
                     ("é" * 32768, "65535")):
        with pytest.raises(UsageError, match=re.escape(why)):
            validate_raw_topic(bad)


def test_payload_forms() -> None:
    assert payload_text(JSON_PAYLOAD) == '{"temp": 21.5, "unit": "°C"}'
    assert payload_text(BINARY_PAYLOAD) == "0x0001feff"
    assert payload_text(b"two\nlines") == "0x" + b"two\nlines".hex()  # one line per message
    assert payload_text(b"") == "0x"
    assert format_line(RawMessage("a/b", b"on", True)) == "a/b [retained] on"
    assert json.loads(format_json(RawMessage("a/b", b"two\nlines", False))) == \
        {"topic": "a/b", "retain": False, "payload": "two\nlines"}
    assert json.loads(format_json(RawMessage("a/b", BINARY_PAYLOAD, True))) == \
        {"topic": "a/b", "retain": True, "payload_base64": base64.b64encode(BINARY_PAYLOAD).decode()}


# -- against mosquitto ---------------------------------------------------------------------------
@pytest.mark.mosquitto
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_sub_raw_prints_what_plain_devices_publish(broker: EmbeddedBroker, as_json: bool) -> None:
    site = "site1" + uuid.uuid4().hex[:8]  # the shared broker: nobody else's messages
    topic = f"{site}/dev1/telemetry"
    proc = subprocess.Popen([*CLI, "sub", "--raw", "--broker", broker.url, *(["--json"] if as_json else []),
                             "--count", "2", f"{site}/+/telemetry"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_stderr(proc, b"subscribed to " + f"{site}/+/telemetry".encode())

        async def publish() -> None:
            async with client(broker) as c:
                await c.publish(topic, JSON_PAYLOAD, qos=1)
                await c.publish(f"{site}/dev1/other", b"not matched", qos=1)
                await c.publish(topic, BINARY_PAYLOAD, qos=1)

        anyio.run(publish)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
    finally:
        proc.kill()
        proc.wait()
    lines = out.decode().splitlines()
    if as_json:
        assert [json.loads(line) for line in lines] == [
            {"topic": topic, "retain": False, "payload": JSON_PAYLOAD.decode()},
            {"topic": topic, "retain": False, "payload_base64": base64.b64encode(BINARY_PAYLOAD).decode()},
        ]
    else:
        assert lines == [f"{topic} {JSON_PAYLOAD.decode()}", f"{topic} 0x0001feff"]


@pytest.mark.mosquitto
@pytest.mark.anyio
async def test_pub_raw_arrives_byte_for_byte(broker: EmbeddedBroker) -> None:
    topic = f"site1{uuid.uuid4().hex[:8]}/dev1/cmnd"
    binary = b"\x00\xff raw \n\x80"
    async with client(broker) as c:
        await c.subscribe(topic, qos=1)  # returns after the SUBACK
        out = await anyio.to_thread.run_sync(lambda: run("pub", "--raw", "--broker", broker.url, topic, "-",
                                                         stdin=binary))
        assert out.returncode == 0, out.stderr
        out = await anyio.to_thread.run_sync(lambda: run("pub", "--raw", "--qos", "0", "--broker", broker.url,
                                                         topic, "ON °"))
        assert out.returncode == 0, out.stderr
        got = []
        with anyio.fail_after(20):
            async for m in c.messages:
                got.append((m.payload, m.qos, m.retain))
                if len(got) == 2:
                    break
    assert got == [(binary, 1, False), ("ON °".encode(), 0, False)]


@pytest.mark.mosquitto
@pytest.mark.anyio
async def test_pub_raw_retain_reaches_a_later_subscriber(broker: EmbeddedBroker) -> None:
    topic = f"site1{uuid.uuid4().hex[:8]}/dev1/state"
    out = await anyio.to_thread.run_sync(lambda: run("pub", "--raw", "--retain", "--broker", broker.url,
                                                     topic, "online"))
    assert out.returncode == 0, out.stderr
    async with client(broker) as c:
        await c.subscribe(topic, qos=1)
        with anyio.fail_after(20):
            m = await anext(aiter(c.messages))
        assert (m.payload, m.retain) == (b"online", True)
        await c.publish(topic, b"", qos=1, retain=True)  # clear it


@pytest.mark.mosquitto
def test_pub_string_still_sends_a_node_message(broker: EmbeddedBroker) -> None:
    ns = "t" + uuid.uuid4().hex[:10]
    sub = subprocess.Popen([*CLI, "sub", "--broker", broker.url, "--namespace", ns, "--json", "--count", "1", "/s"],
                           stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while sub.poll() is None and time.monotonic() < deadline:  # until the subscriber is there
            pub = run("pub", "--string", "--broker", broker.url, "--namespace", ns, "/s/x", "{not json")
            assert pub.returncode == 0, pub.stderr
            try:
                out, _ = sub.communicate(timeout=1)
                break
            except subprocess.TimeoutExpired:
                continue
        assert sub.returncode == 0
        assert json.loads(out.splitlines()[0])["data"] == "{not json"
    finally:
        sub.kill()
        sub.wait()


@pytest.mark.parametrize("args, message", [
    (["sub", "--raw", "a/#/b"], b"'#' must be a whole level"),
    (["sub", "--raw", "site1/+/telemetry", "a/b+"], b"'+' must be a whole level"),
    (["sub", "--raw", ""], b"must not be empty"),
    (["pub", "--raw", "a/+/b", "1"], b"cannot publish on a wildcard"),
    (["pub", "--raw", "", "1"], b"must not be empty"),
    (["pub", "--raw", "a" * 65536, "1"], b"longer than 65535 bytes"),
    (["pub", "--raw", "--string", "a", "1"], b"do not go together"),
    (["pub", "--retain", "/a", "1"], b"--retain needs --raw"),
    (["pub", "/a", "{not json"], b"use --string"),
], ids=["sub-hash", "sub-plus", "sub-empty", "pub-wildcard", "pub-empty", "pub-long", "raw-string", "retain",
        "not-json"])
def test_bad_raw_arguments_exit_2(args: list[str], message: bytes) -> None:
    out = run(*args[:1], "--broker", UNREACHABLE, *args[1:])  # checked before connecting: never exit 3
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(b"broker-mqtt: ") and message in out.stderr


@pytest.mark.parametrize("args", [["sub", "--raw", "site1/#"], ["pub", "--raw", "site1/x", "1"]])
def test_raw_without_a_broker(args: list[str]) -> None:
    out = run(*args[:1], "--broker", UNREACHABLE, *args[1:])
    assert out.returncode == 3 and b"could not connect" in out.stderr
    out = subprocess.run([*CLI, *args], capture_output=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "BROKER_MQTT_URL"})
    assert out.returncode == 2 and b"needs --broker" in out.stderr
