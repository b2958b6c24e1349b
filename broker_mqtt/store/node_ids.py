"""Node ids of attached master and clone stores: ``<endpoint uuid hex>.<random incarnation>``.

A handle takes a new id each time it is attached, so a restarted master is a new channel producer
(``docs/stores.md`` § 6); a clone's writer is ``<clone id>/w<n>``. The id begins with the
endpoint's UUID in hex, so a peer can unicast to the endpoint that owns an id.
"""

from __future__ import annotations

import secrets
import uuid

__all__ = ["new_node_id", "endpoint_of", "endpoint_or_none"]

_ENDPOINTS: dict[str, uuid.UUID] = {}


def new_node_id(endpoint: uuid.UUID) -> str:
    """A fresh node id on ``endpoint``."""
    return f"{endpoint.hex}.{secrets.token_hex(4)}"


def endpoint_of(node_id: str) -> uuid.UUID:
    """The endpoint of a node id (``<uuid hex>.<incarnation>``, writers ``…/w<n>``); ValueError if
    ``node_id`` has no such form."""
    ep = _ENDPOINTS.get(node_id)
    if ep is None:
        ep = uuid.UUID(hex=node_id[:32])
        if len(_ENDPOINTS) < 10_000:
            _ENDPOINTS[node_id] = ep
    return ep


def endpoint_or_none(node_id: str) -> uuid.UUID | None:
    """The endpoint of a node id; None if it does not name one."""
    try:
        return endpoint_of(node_id)
    except ValueError:
        return None
