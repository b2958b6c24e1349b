"""Brokers without subscription identifiers: the endpoint matches topics instead, and warns."""

from __future__ import annotations

import logging
import uuid

import anyio
import cbor2
import pytest

from broker_mqtt import Endpoint
from broker_mqtt.transport.base import Received
from broker_mqtt.wire.identity import default_client_id
from broker_mqtt.wire.message import Kind, NodeEncoder

pytestmark = pytest.mark.anyio


def publish(topic: str, payload: bytes) -> Received:
    return Received(topic, payload, qos=1, retain=False, subscription_ids=())


async def test_topic_matching_when_the_broker_sends_no_ids(caplog: pytest.LogCaptureFixture) -> None:
    ep = Endpoint("mqtt://127.0.0.1:1", namespace="ns")  # never connected: we feed it PUBLISHes
    sender = uuid.uuid4()
    enc = NodeEncoder(sender.bytes)
    head = f"ns/d/{default_client_id(sender)}"  # the sender names itself in the topic
    async with ep.subscribe("/a") as wide, ep.subscribe("/a/b") as narrow, ep.subscribe("/z") as other:
        with caplog.at_level(logging.WARNING, logger="broker_mqtt"):
            await ep._receiver.dispatch(publish(f"{head}/a/b/c", enc.encode(Kind.DATA, "/a/b/c", cbor2.dumps(1))))
            await ep._receiver.dispatch(publish(f"{head}/a/x", enc.encode(Kind.DATA, "/a/x", cbor2.dumps(2))))
        assert "no subscription identifiers" in caplog.text
        with anyio.fail_after(10):
            assert [(await wide.get()).data, (await wide.get()).data] == [1, 2]
            assert (await narrow.get()).data == 1
        assert not wide._items and not narrow._items
        with anyio.move_on_after(0.1):
            pytest.fail(f"unexpected {await other.get()}")
        with anyio.move_on_after(0.1):
            pytest.fail(f"delivered twice: {await narrow.get()}")
