"""TLS (mqtts://) and username/password against a real mosquitto configured for both."""

from __future__ import annotations

import gc
import subprocess
from pathlib import Path

import anyio
import pytest

from broker_mqtt import BrokerUnavailable, EmbeddedBroker, Endpoint, TLSOptions
from broker_mqtt.transport.embedded import _free_port

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


# What Python 3.13+ requires (ssl.create_default_context sets VERIFY_X509_STRICT): a CA with
# basicConstraints critical CA:TRUE, keyUsage keyCertSign (else "CA cert does not include key usage
# extension"), and a server certificate with an authorityKeyIdentifier and the host in its
# subjectAltName. docs/operations.md § TLS shows the same commands.
_CA_CONFIG = """\
[req]
distinguished_name = dn
x509_extensions = v3_ca
prompt = no
[dn]
CN = {cn}
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""

_SERVER_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


def _make_ca(d: Path, name: str) -> None:
    """``<name>.key`` and ``<name>.crt``: a self-signed CA fit for Python 3.13's strict verification."""
    (d / f"{name}.cnf").write_text(_CA_CONFIG.format(cn=f"test-{name}"))
    _openssl("req", "-x509", "-config", f"{name}.cnf", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.crt, server.crt/.key (for 127.0.0.1, signed by ca) and other.crt (a CA that signed nothing)."""
    d = tmp_path_factory.mktemp("pki")
    _make_ca(d, "ca")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=d)
    (d / "server.ext").write_text(_SERVER_EXTENSIONS)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "server.ext", "-out", "server.crt", cwd=d)
    _make_ca(d, "other")
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
            with anyio.fail_after(30):
                assert (await sub.get()).data == "over tls"
        # the reason: an untrusted issuer (how OpenSSL words it depends on the version and its flags),
        # not a malformed certificate
        wrong_ca = "did not verify.*(unable to get local issuer|self.signed certificate in certificate chain)"
        with anyio.fail_after(30), pytest.raises(BrokerUnavailable, match=wrong_ca):
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
        with anyio.fail_after(30), pytest.raises(BrokerUnavailable, match="refused"):
            async with Endpoint(f"mqtt://alice:wrong@127.0.0.1:{broker.port}", connect_timeout=10):
                pass
        with anyio.fail_after(30), pytest.raises(BrokerUnavailable, match="refused"):
            async with Endpoint(broker, connect_timeout=10):  # anonymous
                pass
