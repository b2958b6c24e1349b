"""Where the broker is: ``mqtt://[user:password@]host[:port]`` or ``mqtts://...`` plus TLS options."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..errors import UsageError

__all__ = ["BrokerURL", "TLSOptions", "parse_broker_urls"]


@dataclass(frozen=True, slots=True)
class TLSOptions:
    """TLS settings for ``mqtts://`` URLs.

    ``ca_file`` verifies the broker (system CAs when None); ``cert_file``/``key_file`` present a
    client certificate; ``verify=False`` disables certificate *and* host name checks (testing only).
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


@dataclass(frozen=True, slots=True)
class BrokerURL:
    host: str
    port: int
    tls: bool = False
    username: str | None = None
    password: str | None = None

    @classmethod
    def parse(cls, url: str) -> BrokerURL:
        """Parse a broker URL; raises :class:`UsageError` naming what is wrong."""
        parts = urlsplit(url)
        if parts.scheme not in ("mqtt", "mqtts"):
            raise UsageError(f"broker URL {url!r} must start with mqtt:// or mqtts://")
        if not parts.hostname:
            raise UsageError(f"broker URL {url!r} has no host")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise UsageError(f"broker URL {url!r} must not have a path, query or fragment")
        tls = parts.scheme == "mqtts"
        try:
            port = parts.port or (8883 if tls else 1883)
        except ValueError:
            raise UsageError(f"broker URL {url!r} has an invalid port") from None
        return cls(
            host=parts.hostname,
            port=port,
            tls=tls,
            username=unquote(parts.username) if parts.username is not None else None,
            password=unquote(parts.password) if parts.password is not None else None,
        )

    def __str__(self) -> str:  # never shows the password
        user = f"{self.username}@" if self.username else ""
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{self.host}:{self.port}"


def parse_broker_urls(urls: str | Sequence[str]) -> list[BrokerURL]:
    """Several brokers, in the order to try them: a list of URLs, or one string of URLs separated
    by commas (``mqtt://a:1883,mqtt://b:1883``: the form that fits an option or an environment
    variable). Raises :class:`UsageError` naming the URL that is wrong, or for none at all."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    parsed = [BrokerURL.parse(u.strip()) for u in items if u.strip()]
    if not parsed:
        raise UsageError(f"no broker URL in {urls!r}")
    return parsed
