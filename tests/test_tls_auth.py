"""Transport security against a real mosquitto: server TLS, username/password, and mutual TLS (client
certificates, the certificate's common name as the MQTT identity, an ACL that applies to it), from
an Endpoint and from the command line. Brokers and certificates: tests/secure_broker.py, tests/pki.py.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from pki import PKI
from secure_broker import SecureBroker

from broker_mqtt import BrokerUnavailable, Endpoint, RawSubscription, TLSOptions

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]

CLI = [sys.executable, "-m", "broker_mqtt"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return PKI(tmp_path_factory.mktemp("pki"))


# paho-mqtt does not close its socket when a TLS handshake fails; the wrong-CA case below makes
# exactly one such attempt (the endpoint fails fast on a verification error).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_tls_with_ca_verification(pki: PKI, tmp_path: Path) -> None:
    other = pki.make_ca("other")  # a CA that signed nothing of this broker
    async with SecureBroker(tmp_path, pki=pki, client_certs=False, anonymous=True) as sb:
        assert sb.tls_url is not None
        async with (
            Endpoint(sb.tls_url, tls=pki.tls()) as a,
            Endpoint(sb.url) as plain,  # the plain listener shares the broker: TLS is per connection
            plain.subscribe("/secure") as sub,
        ):
            await a.publish("/secure/x", "over tls")
            with anyio.fail_after(30):
                assert (await sub.get()).data == "over tls"
        # the reason: an untrusted issuer (how OpenSSL words it depends on the version and its flags),
        # not a malformed certificate
        wrong_ca = "did not verify.*(unable to get local issuer|self.signed certificate in certificate chain)"
        with anyio.fail_after(30), pytest.raises(BrokerUnavailable, match=wrong_ca):
            async with Endpoint(sb.tls_url, tls=TLSOptions(ca_file=str(other.cert)), connect_timeout=10):
                pass
        async with Endpoint(sb.tls_url, tls=TLSOptions(verify=False)):  # testing only, but it must work
            pass
    gc.collect()  # collect paho's leaked socket here, where the warning is expected


async def test_username_password(tmp_path: Path) -> None:
    async with SecureBroker(tmp_path, users={"alice": "s3cret"}) as sb:
        async with Endpoint(sb.user_url("alice")) as ep:
            assert ep.connected
        with anyio.fail_after(30), pytest.raises(BrokerUnavailable, match="refused"):
            async with Endpoint(f"mqtt://alice:wrong@127.0.0.1:{sb.broker.port}", connect_timeout=10):
                pass
        with anyio.fail_after(30), pytest.raises(BrokerUnavailable, match="refused"):
            async with Endpoint(sb.url, connect_timeout=10):  # anonymous
                pass


async def test_mutual_tls_endpoints_with_client_certificates_talk(pki: PKI, tmp_path: Path) -> None:
    async with SecureBroker(tmp_path, pki=pki) as sb:
        assert sb.tls_url is not None
        async with (
            Endpoint(sb.tls_url, tls=pki.tls("gw7")) as gw7,
            Endpoint(sb.tls_url, tls=pki.tls("gw8")) as gw8,
            gw8.subscribe("/readings") as sub,
        ):
            with anyio.fail_after(30):
                await gw7.await_peer(gw8.id)  # subscriptions travel with presence
            await gw7.publish("/readings/t", 21.5)
            with anyio.fail_after(30):
                msg = await sub.get()
            assert (msg.topic, msg.data, msg.sender) == ("/readings/t", 21.5, gw7.id)


# TLS 1.3: the client's handshake is over before the broker has checked its certificate, so the
# refusal arrives as a TLS alert on the first read: the transport reports it as a permanent refusal
# (ConnectRefused), so the endpoint raises BrokerUnavailable at once instead of retrying.
@pytest.mark.parametrize(
    ("case", "alert"),
    [("no certificate", "CERTIFICATE_REQUIRED|certificate required"), ("another CA", "UNKNOWN_CA|unknown ca")],
)
async def test_mutual_tls_refuses_a_missing_or_foreign_client_certificate(
    pki: PKI, tmp_path: Path, case: str, alert: str
) -> None:
    tls = pki.tls() if case == "no certificate" else pki.tls("gw7", ca=pki.make_ca("stranger"))
    async with SecureBroker(tmp_path, pki=pki) as sb:
        assert sb.tls_url is not None
        with anyio.fail_after(30), pytest.raises(BrokerUnavailable) as refused:
            async with Endpoint(sb.tls_url, tls=tls, connect_timeout=25):  # fails before: no retry
                pass
        message = str(refused.value)
        assert "refused the connection" in message and "before CONNACK" in message and "client certificate" in message, message
        assert any(word in message for word in alert.split("|")), message
        async with Endpoint(sb.tls_url, tls=pki.tls("gw7"), connect_timeout=10) as ep:  # the broker is fine
            assert ep.connected


async def _next_payloads(sub: RawSubscription, marker: bytes) -> list[bytes]:
    """The payloads ``sub`` gets up to and including ``marker``."""
    seen: list[bytes] = []
    with anyio.fail_after(30):
        async for msg in sub:
            seen.append(msg.payload)
            if msg.payload == marker:
                return seen
    raise AssertionError("subscription ended")


async def test_the_certificate_common_name_is_the_mqtt_identity(pki: PKI, tmp_path: Path) -> None:
    """An ACL grants user gw7 t/gw7/# (and the endpoint namespace): a client whose certificate says
    CN=gw7 can write and read there and nowhere else under t/. Each check sends the forbidden message
    first and an allowed marker after it on the same connection: when the marker arrives, the forbidden
    one would have arrived before it."""
    acl = (
        "user gw7\ntopic readwrite t/gw7/#\ntopic readwrite bm/#\n\n"
        "user watcher\ntopic readwrite #\n"
    )
    async with SecureBroker(tmp_path, pki=pki, acl=acl) as sb:
        assert sb.tls_url is not None
        async with (
            Endpoint(sb.tls_url, tls=pki.tls("gw7")) as gw7,
            Endpoint(sb.tls_url, tls=pki.tls("watcher")) as watcher,
            watcher.subscribe_raw("t/#") as everything,
            gw7.subscribe_raw("t/gw7/#", "t/other/#") as gw7_sees,
        ):
            # writing: gw7 may publish under t/gw7/ only
            await gw7.publish_raw("t/other/x", b"forged")
            await gw7.publish_raw("t/gw7/x", b"write marker")
            assert await _next_payloads(everything, b"write marker") == [b"write marker"]
            # reading: gw7 gets what is published under t/gw7/ only
            await watcher.publish_raw("t/other/y", b"secret")
            await watcher.publish_raw("t/gw7/y", b"read marker")
            assert await _next_payloads(everything, b"read marker") == [b"secret", b"read marker"]
            assert await _next_payloads(gw7_sees, b"read marker") == [b"write marker", b"read marker"]


async def test_cli_presents_a_client_certificate(pki: PKI, tmp_path: Path) -> None:
    async with SecureBroker(tmp_path, pki=pki) as sb:
        assert sb.tls_url is not None
        cert = pki.client("cli")
        files = ["--ca-file", str(pki.ca.cert), "--cert-file", str(cert.cert), "--key-file", str(cert.key)]
        async with Endpoint(sb.tls_url, tls=pki.tls("gw8")) as ep, ep.subscribe("/cli") as sub:
            done = await anyio.to_thread.run_sync(lambda: subprocess.run(
                [*CLI, "pub", "--broker", sb.tls_url or "", *files, "/cli/x", '{"n": 1}'],
                capture_output=True, text=True, timeout=120))
            assert done.returncode == 0, done.stderr
            with anyio.fail_after(30):
                assert (await sub.get()).data == {"n": 1}
        plain = await anyio.to_thread.run_sync(lambda: subprocess.run(
            [*CLI, "pub", "--broker", sb.url, *files, "/cli/x", "1"], capture_output=True, text=True, timeout=120))
        assert plain.returncode == 2 and "need an mqtts:// broker URL" in plain.stderr, plain.stderr
