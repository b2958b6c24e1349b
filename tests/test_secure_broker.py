"""tests/secure_broker.py itself: the options the transport-security tests do not exercise."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest
from secure_broker import SecureBroker

from broker_mqtt import BrokerUnavailable, Endpoint

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]


async def test_dynamic_security_plugin_authenticates(tmp_path: Path) -> None:
    """A dynamic-security configuration with one client, ``admin``: only the plugin knows its password
    (no password file), and its default ACL lets everyone publish and subscribe."""
    config = tmp_path / "dynsec.json"
    subprocess.run(["mosquitto_ctrl", "dynsec", "init", str(config), "admin", "adminpw"],
                   check=True, capture_output=True)
    data = json.loads(config.read_text())
    data["defaultACLAccess"] = dict.fromkeys(data["defaultACLAccess"], True)
    config.write_text(json.dumps(data))
    async with SecureBroker(tmp_path / "broker", dynsec=config) as sb:
        port = sb.broker.port
        admin = f"mqtt://admin:adminpw@127.0.0.1:{port}"
        async with Endpoint(admin) as a, Endpoint(admin) as b, b.subscribe("/d") as sub:
            with anyio.fail_after(30):
                await a.await_peer(b.id)  # subscriptions travel with presence
            await a.publish("/d/x", 1)
            with anyio.fail_after(30):
                assert (await sub.get()).data == 1
        for wrong in (f"mqtt://admin:nope@127.0.0.1:{port}", f"mqtt://mallory:x@127.0.0.1:{port}", sb.url):
            with anyio.fail_after(30), pytest.raises(BrokerUnavailable, match="refused"):
                async with Endpoint(wrong, connect_timeout=10):
                    pass


async def test_acl_applies_to_password_users(tmp_path: Path) -> None:
    """bob may read a/# but not write it: his forged message, sent before his marker on the same
    connection, would reach alice before the marker."""
    acl = ("user alice\ntopic readwrite bm/#\ntopic readwrite a/#\ntopic read b/#\n\n"
           "user bob\ntopic readwrite bm/#\ntopic read a/#\ntopic readwrite b/#\n")
    async with (
        SecureBroker(tmp_path, users={"alice": "pa", "bob": "pb"}, acl=acl) as sb,
        Endpoint(sb.user_url("alice")) as alice,
        Endpoint(sb.user_url("bob")) as bob,
        alice.subscribe_raw("a/#", "b/#") as seen,
    ):
        await bob.publish_raw("a/forged", b"forged")
        await bob.publish_raw("b/marker", b"marker")
        with anyio.fail_after(30):
            first = await anext(seen)
        assert first.payload == b"marker"
