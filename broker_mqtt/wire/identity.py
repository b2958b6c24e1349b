"""Who an endpoint is on the wire: its MQTT client id, and the endpoint id derived from it.

Every topic an endpoint publishes to names its **client id** (``docs/security.md``), so a broker
ACL that lets a principal write only below its own client id makes its messages unforgeable by
others, and a receiver can check what a message claims about its sender against the topic it
came on. The node message's 16-byte sender (an endpoint id, a UUID) must therefore be a function of
the client id, and :func:`endpoint_id` is that function:

* the default client id of endpoint ``u`` is ``bm-<u in 32 lowercase hex digits>``, and maps back
  to ``u`` (random ids, as before);
* any other client id ``c`` (a principal's name, e.g. ``gateway-7``) maps to
  ``uuid5(ENDPOINT_ID_NAMESPACE, c)``: an endpoint created with ``client_id="gateway-7"`` has
  that id everywhere, and so does the same client id after a restart.

Client ids beginning with ``bm-`` are reserved for the default form: a chosen client id may not
start with it (otherwise ``bm-<victim hex>`` would name another endpoint's id).
"""

from __future__ import annotations

import uuid
from functools import lru_cache

from ..errors import UsageError

__all__ = ["ENDPOINT_ID_NAMESPACE", "default_client_id", "endpoint_id", "validate_client_id", "resolve_identity",
           "node_endpoint"]

#: the uuid5 namespace of endpoint ids derived from chosen client ids
ENDPOINT_ID_NAMESPACE = uuid.UUID("5b1e6f1c-9d7e-4a5e-8c33-6d2f0b8e4a17")

_DEFAULT_PREFIX = "bm-"
_MAX_CLIENT_ID = 256


def default_client_id(endpoint: uuid.UUID) -> str:
    """The client id of an endpoint that was not given one: ``bm-<id hex>``."""
    return _DEFAULT_PREFIX + endpoint.hex


def validate_client_id(client_id: str) -> str:
    """Return ``client_id`` if it can name an endpoint in a topic level; raise :class:`UsageError`.

    A client id is a non-empty topic level (no ``/``, ``+``, ``#``, NUL; not starting with ``$``),
    at most 256 bytes of UTF-8, and does not start with ``bm-`` (reserved for default ids).
    """
    if not isinstance(client_id, str) or not client_id:
        raise UsageError(f"a client id must be a non-empty str, not {client_id!r}")
    if any(c in client_id for c in "/+#\0") or client_id.startswith("$"):
        raise UsageError(f"client id {client_id!r} must not contain '/', '+', '#' or NUL, nor start with '$'")
    try:
        size = len(client_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError(f"client id {client_id!r} is not valid UTF-8") from None
    if size > _MAX_CLIENT_ID:
        raise UsageError(f"client id is longer than {_MAX_CLIENT_ID} bytes")
    if client_id.startswith(_DEFAULT_PREFIX):
        raise UsageError(f"client ids starting with {_DEFAULT_PREFIX!r} are reserved for endpoints given none")
    return client_id


@lru_cache(maxsize=4096)
def endpoint_id(client_id: str) -> uuid.UUID | None:
    """The endpoint id that client id ``client_id`` speaks for; None if it cannot name one.

    Pure and cached: receivers call it for the sender level of every PUBLISH.
    """
    if client_id.startswith(_DEFAULT_PREFIX):
        digits = client_id[len(_DEFAULT_PREFIX):]
        if len(digits) != 32 or digits.lower() != digits:
            return None
        try:
            return uuid.UUID(hex=digits)
        except ValueError:
            return None
    if not client_id or any(c in client_id for c in "/+#\0"):
        return None
    return uuid.uuid5(ENDPOINT_ID_NAMESPACE, client_id)


def resolve_identity(endpoint: uuid.UUID | None, client_id: str | None) -> tuple[uuid.UUID, str]:
    """``(endpoint id, client id)`` of an endpoint given either, both or neither (then a random id);
    :class:`UsageError` for a bad client id, or an id that is not the one ``client_id`` names."""
    if client_id is None:
        endpoint = endpoint or uuid.uuid4()
        return endpoint, default_client_id(endpoint)
    derived = endpoint_id(validate_client_id(client_id))
    assert derived is not None  # a valid chosen client id always names one
    if endpoint is not None and endpoint != derived:
        raise UsageError(f"id {endpoint} is not the id of client id {client_id!r} ({derived}); give one of them")
    return derived, client_id


def node_endpoint(node: str) -> str:
    """The endpoint id, in hex, that a node id speaks for: node ids of stores, queue consumers and
    elections are ``<endpoint id hex>.<anything>`` (or just the hex). What a receiver compares with
    the endpoint the topic names."""
    return node.partition(".")[0]
