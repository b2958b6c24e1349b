"""Test certificates made with the ``openssl`` command: CAs, a server certificate, client certificates.

``PKI(directory)`` makes, in ``directory``, a CA (``pki.ca``) and a certificate for a broker on
127.0.0.1 signed by it (``pki.server``). Then:

- ``pki.client("gw7")``: a client certificate with CN ``gw7`` signed by ``pki.ca`` (made once per
  CN and CA, then reused); ``pki.client("gw7", ca=pki.make_ca("other"))`` one signed by another CA;
- ``pki.tls("gw7")``: the :class:`TLSOptions` an endpoint needs to verify the broker against
  ``pki.ca`` and present that client certificate (``pki.tls()``: no client certificate).

What Python 3.13+ requires (``ssl.create_default_context`` sets VERIFY_X509_STRICT): a CA with
basicConstraints critical CA:TRUE and keyUsage keyCertSign (else "CA cert does not include key usage
extension"), and a server certificate with an authorityKeyIdentifier and the host in its
subjectAltName. docs/operations.md § TLS shows the same commands. Keys are EC P-256 (fast to make).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from broker_mqtt import TLSOptions

__all__ = ["PKI", "CertPair"]

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
subjectAltName = IP:{host}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""

_CLIENT_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""

_NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True, slots=True)
class CertPair:
    """A certificate and its private key (PEM files)."""

    cert: Path
    key: Path


class PKI:
    """A CA, a server certificate for ``host`` and client certificates on demand, all in ``directory``."""

    def __init__(self, directory: Path, *, host: str = "127.0.0.1") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = self.make_ca("ca")
        self.server = self._issue("server", self.ca, cn=host, extensions=_SERVER_EXTENSIONS.format(host=host))
        self._clients: dict[tuple[str, Path], CertPair] = {}

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], cwd=self.dir, check=True, capture_output=True)

    def make_ca(self, name: str) -> CertPair:
        """A self-signed CA ``<name>.crt``/``<name>.key`` (CN ``test-<name>``); made again if it exists."""
        (self.dir / f"{name}.cnf").write_text(_CA_CONFIG.format(cn=f"test-{name}"))
        self._openssl("req", "-x509", "-config", f"{name}.cnf", *_NEW_KEY, "-days", "2",
                      "-keyout", f"{name}.key", "-out", f"{name}.crt")
        return CertPair(self.dir / f"{name}.crt", self.dir / f"{name}.key")

    def _issue(self, name: str, ca: CertPair, *, cn: str, extensions: str) -> CertPair:
        self._openssl("req", *_NEW_KEY, "-subj", f"/CN={cn}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        (self.dir / f"{name}.ext").write_text(extensions)
        self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca.cert), "-CAkey", str(ca.key),
                      "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt")
        return CertPair(self.dir / f"{name}.crt", self.dir / f"{name}.key")

    def client(self, cn: str, *, ca: CertPair | None = None) -> CertPair:
        """A client certificate with common name ``cn`` signed by ``ca`` (default: ``self.ca``)."""
        ca = ca or self.ca
        key = (cn, ca.cert)
        if key not in self._clients:
            name = f"client-{len(self._clients)}"
            self._clients[key] = self._issue(name, ca, cn=cn, extensions=_CLIENT_EXTENSIONS)
        return self._clients[key]

    def tls(self, cn: str | None = None, *, ca: CertPair | None = None) -> TLSOptions:
        """TLS options trusting ``self.ca`` and, when ``cn`` is given, presenting ``self.client(cn, ca=ca)``."""
        if cn is None:
            return TLSOptions(ca_file=str(self.ca.cert))
        pair = self.client(cn, ca=ca)
        return TLSOptions(ca_file=str(self.ca.cert), cert_file=str(pair.cert), key_file=str(pair.key))
