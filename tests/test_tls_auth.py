"""TLS (mqtts://) and username/password against a real mosquitto configured for both."""

from __future__ import annotations

import gc
import subprocess
from pathlib import Path

import anyio
import pytest

from broker_mqtt import BrokerUnavailable, EmbeddedBroker, Endpoint, TLSOptions
from broker_mqtt.embedded import _free_port

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=d)
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.cnf", "-out", "server.crt", cwd=d)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=other-ca",
             "-keyout", "other.key", "-out", "other.crt", cwd=d)
    return d


# paho-mqtt does not close its socket when a TLS handshake fails; the wrong-CA case below makes
# exactly one such attempt (the endpoint fails fast on a verification error).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_tls_with_ca_verification(pki: Path) -> None:
    tls_port = _free_port()
    extra = (
        f"listener {tls_port} 127.0.0.1\n"
        f"cafile {pki / 'ca.crt'}\ncertfile {pki / 'server.crt'}\nkeyfile {pki / 'server.key'}\n"
    )
    with EmbeddedBroker(extra_config=extra) as broker:
        url = f"mqtts://127.0.0.1:{tls_port}"
        async with (
            Endpoint(url, tls=TLSOptions(ca_file=str(pki / "ca.crt"))) as a,
            Endpoint(broker) as plain,  # the plain listener shares the broker: TLS is per connection
            plain.subscribe("/secure") as sub,
        ):
            await a.publish("/secure/x", "over tls")
            with anyio.fail_after(5):
                assert (await sub.get()).data == "over tls"
        with anyio.fail_after(5), pytest.raises(BrokerUnavailable, match="did not verify"):
            async with Endpoint(url, tls=TLSOptions(ca_file=str(pki / "other.crt")), connect_timeout=10):
                pass
        async with Endpoint(url, tls=TLSOptions(verify=False)):  # testing only, but it must work
            pass
    gc.collect()  # collect paho's leaked socket here, where the warning is expected


async def test_username_password(tmp_path: Path) -> None:
    passwords = tmp_path / "passwd"
    passwords.touch()
    subprocess.run(["mosquitto_passwd", "-b", str(passwords), "alice", "s3cret"], check=True)
    with EmbeddedBroker(password_file=str(passwords)) as broker:
        async with Endpoint(f"mqtt://alice:s3cret@127.0.0.1:{broker.port}") as ep:
            assert ep.connected
        with anyio.fail_after(5), pytest.raises(BrokerUnavailable, match="refused"):
            async with Endpoint(f"mqtt://alice:wrong@127.0.0.1:{broker.port}", connect_timeout=10):
                pass
        with anyio.fail_after(5), pytest.raises(BrokerUnavailable, match="refused"):
            async with Endpoint(broker, connect_timeout=10):  # anonymous
                pass
