"""A real mosquitto with authentication and authorization, for tests of transport security and ACLs.

``SecureBroker(directory, ...)`` configures an :class:`EmbeddedBroker` (every listener on 127.0.0.1)
with any of these, all optional:

- ``users={"alice": "s3cret"}``: a password file made with ``mosquitto_passwd -b``;
- ``acl="user gw7\\ntopic readwrite t/gw7/#\\n"``: the text of a mosquitto ``acl_file``;
- ``dynsec=path``: the configuration file of the dynamic-security plugin
  (``mosquitto_dynamic_security.so``; mosquitto rewrites the file when it is changed over
  ``$CONTROL/dynamic-security/#``, so pass a copy you own);
- ``pki=PKI(...)`` (see tests/pki.py): a second, TLS listener with ``pki.server``'s certificate. With
  ``client_certs=True`` (the default) that listener requires a client certificate signed by ``pki.ca``
  (``require_certificate true``) and takes its common name as the MQTT username
  (``use_identity_as_username true``): the name the ACL and the dynamic-security roles apply to.

Anonymous clients are refused unless ``anonymous=True``. mosquitto runs without
``per_listener_settings``, so the password file, the ACL and the plugin apply to both listeners;
mosquitto consults the password file and the plugin alike when both are given.

Use it as ``with SecureBroker(...) as sb:`` or ``async with``; then

- ``sb.url``: the plain listener, ``mqtt://127.0.0.1:P`` (no credentials);
- ``sb.user_url("alice")``: the same with ``alice``'s name and password from ``users``;
- ``sb.tls_url``: the TLS listener, ``mqtts://127.0.0.1:T`` (None without ``pki``); connect with
  ``Endpoint(sb.tls_url, tls=pki.tls("gw7"))`` to be user ``gw7``;
- ``sb.broker`` (the :class:`EmbeddedBroker`: ``log_tail()``, ``restart()``), ``sb.password_file``,
  ``sb.acl_file``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from pki import PKI

from broker_mqtt import EmbeddedBroker
from broker_mqtt.transport.embedded import _free_port

__all__ = ["DYNSEC_PLUGIN", "SecureBroker"]

DYNSEC_PLUGIN = "/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so"
HOST = "127.0.0.1"


class SecureBroker:
    """A mosquitto with a password file, an ACL, the dynamic-security plugin and/or (mutual) TLS."""

    def __init__(
        self,
        directory: Path,
        *,
        users: Mapping[str, str] | None = None,
        acl: str | None = None,
        dynsec: Path | None = None,
        pki: PKI | None = None,
        client_certs: bool = True,
        anonymous: bool = False,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.users = dict(users or {})
        self.password_file: Path | None = None
        self.acl_file: Path | None = None
        self.tls_url: str | None = None
        lines = [f"allow_anonymous {'true' if anonymous else 'false'}"]  # overrides EmbeddedBroker's line
        if users is not None:
            self.password_file = directory / "passwd"
            self.password_file.write_text("")
            for user, password in self.users.items():
                subprocess.run(["mosquitto_passwd", "-b", str(self.password_file), user, password],
                               check=True, capture_output=True)
        if acl is not None:
            self.acl_file = directory / "acl"
            self.acl_file.write_text(acl)
            lines.append(f"acl_file {self.acl_file}")
        if dynsec is not None:
            lines += [f"plugin {DYNSEC_PLUGIN}", f"plugin_opt_config_file {dynsec}"]
        if pki is not None:
            port = _free_port()
            self.tls_url = f"mqtts://{HOST}:{port}"
            lines += [f"listener {port} {HOST}", f"cafile {pki.ca.cert}", f"certfile {pki.server.cert}",
                      f"keyfile {pki.server.key}"]
            if client_certs:
                lines += ["require_certificate true", "use_identity_as_username true"]
        self.broker = EmbeddedBroker(
            host=HOST,
            password_file=str(self.password_file) if self.password_file else None,
            extra_config="\n".join(lines) + "\n",
        )

    @property
    def url(self) -> str:
        return self.broker.url

    def user_url(self, user: str) -> str:
        """``mqtt://user:password@127.0.0.1:P`` for one of ``users``."""
        return f"mqtt://{quote(user, safe='')}:{quote(self.users[user], safe='')}@{HOST}:{self.broker.port}"

    def __enter__(self) -> SecureBroker:
        self.broker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.broker.cleanup()

    async def __aenter__(self) -> SecureBroker:
        await self.broker.astart()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.broker.cleanup()
