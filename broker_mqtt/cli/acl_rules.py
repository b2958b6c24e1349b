"""Broker access control from principals and roles: the pure core of ``broker-mqtt acl``.

A deployment describes who may do what in a short TOML (see :func:`parse_spec` and
docs/security.md § Broker ACLs); this module turns it into *grants* -- (principal, client id,
read or write, MQTT filter) -- and renders them for mosquitto's ``acl_file`` and for its dynamic
security plugin. No I/O: the command (:mod:`.acl`) reads the file and writes the output.

The grants follow the topic layout in which every topic an endpoint publishes to names its own
MQTT client id ``C`` (docs/wire-format.md): ``<ns>/d/C/<topic>`` data, ``<ns>/u/<E of D>/C/<topic>``
unicast to ``D``, ``<ns>/p/C`` presence, ``<ns>/actor/store/<name>/C`` elections. So a write grant
always names the writer's own client id and nobody can publish as another client. Every principal:

- writes its presence ``<ns>/p/C``, reads every presence ``<ns>/p/+`` and its unicast ``<ns>/u/<E>/#``
  (``E``: the endpoint id client id ``C`` names, in hex: :func:`broker_mqtt.wire.identity.endpoint_id`);
- publish prefix ``T``: writes ``<ns>/d/C/T/#`` and ``<ns>/u/+/C/T/#``;
- subscribe prefix ``T``: reads ``<ns>/d/+/T/#`` (``/`` = every data topic, stores' traffic included);
- elected store ``N``, role ``member``: writes ``$store/N/{e,em,ew,ea}`` (data and unicast), reads
  ``<ns>/d/+/$store/N/#``, writes its election topic ``<ns>/actor/store/N/C`` and reads
  ``<ns>/actor/store/N/+``; ``writer``: writes ``ew``, reads ``em``; ``reader``: reads ``e``, ``em``;
- queue ``N`` (elected store ``queue-N`` plus ``$queue/N/...``): ``member`` = store member and writes
  and reads ``$queue/N/#``; ``producer`` and ``consumer`` = store writer and reads ``$queue/N/#``;
- master/clone store ``N``: ``master`` writes ``$store/N/m`` and ``a``, reads ``c``; ``clone`` writes
  ``c``, reads ``m`` and ``a``.

Internal topics (first level starting with ``$``) are granted only through roles: a publish prefix
``/`` or ``$...`` is refused, and so is a subscribe prefix ``$...``. Client ids starting with ``bm-``
are reserved for endpoints' default ids (``bm-<uuid hex>``), which no ACL can name in advance.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import TopicError
from ..wire.identity import endpoint_id
from ..wire.topics import TopicLayout, validate_prefix, validate_topic

__all__ = [
    "Access",
    "AclSpecError",
    "AclSpec",
    "Grant",
    "Principal",
    "STORE_ROLES",
    "QUEUE_ROLES",
    "MASTER_STORE_ROLES",
    "parse_spec",
    "grants",
    "render_mosquitto",
    "render_dynsec",
    "dynsec_password",
]

STORE_ROLES = ("member", "writer", "reader")
QUEUE_ROLES = ("member", "producer", "consumer")
MASTER_STORE_ROLES = ("master", "clone")
RESERVED_CLIENT_ID_PREFIX = "bm-"
_TOP_KEYS = ("namespace", "principal")
_PRINCIPAL_KEYS = ("name", "client_ids", "publish", "subscribe", "stores", "queues", "master_stores")
DYNSEC_ITERATIONS = 101  # what mosquitto_ctrl itself writes (mosquitto 2.0)


class AclSpecError(ValueError):
    """The ACL TOML is wrong; the message names the key (``principal[1] 'gw7' stores.fleet: ...``)."""


class Access(enum.Enum):
    READ = "read"
    WRITE = "write"


@dataclass(frozen=True, slots=True)
class Grant:
    """``principal`` (the MQTT username), connected as ``client_id``, may ``access`` ``filter``."""

    principal: str
    client_id: str
    access: Access
    filter: str


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    client_ids: tuple[str, ...]
    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    stores: tuple[tuple[str, str], ...] = ()  # (store name, role)
    queues: tuple[tuple[str, str], ...] = ()
    master_stores: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class AclSpec:
    namespace: str
    principals: tuple[Principal, ...]

    def binds_username_to_client_id(self) -> bool:
        """True when every principal connects with exactly one client id equal to its name, so
        mosquitto's ``use_username_as_clientid true`` can bind each client id to its principal."""
        return all(p.client_ids == (p.name,) for p in self.principals)


# -- parsing ------------------------------------------------------------------------------------


def _check_name(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or value == "":
        raise AclSpecError(f"{where}: {what} must be a non-empty string, not {value!r}")
    bad = [c for c in ("/", "+", "#", "\0") if c in value]
    if bad or any(c.isspace() for c in value):
        raise AclSpecError(f"{where}: {what} {value!r} must not contain '/', '+', '#', NUL or whitespace")
    return value


def _check_client_id(value: Any, where: str, what: str = "client id") -> str:
    name = _check_name(value, where, what)
    if name.startswith(RESERVED_CLIENT_ID_PREFIX):
        raise AclSpecError(
            f"{where}: {what} {name!r} starts with {RESERVED_CLIENT_ID_PREFIX!r}, which is reserved "
            "for endpoints' default client ids: give the endpoint Endpoint(client_id=...)"
        )
    return name


def _prefixes(value: Any, where: str, *, publish: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AclSpecError(f"{where}: must be a list of broker topic prefixes (strings)")
    out = []
    for prefix in value:
        try:
            levels = validate_topic(prefix) if publish else validate_prefix(prefix)
        except TopicError as exc:
            if publish and prefix.strip("/") == "":
                raise AclSpecError(
                    f"{where}: {prefix!r}: publishing on every topic is not granted; list the prefixes"
                ) from None
            raise AclSpecError(f"{where}: {exc}") from None
        if levels and levels[0].startswith("$"):
            raise AclSpecError(
                f"{where}: {prefix!r} is an internal topic: grant it through stores, queues or master_stores"
            )
        out.append("/" + "/".join(levels))
    return tuple(out)


def _roles(value: Any, where: str, allowed: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise AclSpecError(f"{where}: must be a table {{ name = \"role\" }}")
    out = []
    for name, role in value.items():
        _check_name(name, f"{where}.{name}", "name")
        if role not in allowed:
            raise AclSpecError(f"{where}.{name}: unknown role {role!r} (one of {', '.join(allowed)})")
        out.append((name, role))
    return tuple(out)


def parse_spec(data: Mapping[str, Any]) -> AclSpec:
    """Validate a parsed TOML document; raise :class:`AclSpecError` naming the offending key."""
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise AclSpecError(f"unknown top-level key(s) {unknown} (allowed: {', '.join(_TOP_KEYS)})")
    namespace = data.get("namespace", "bm")
    try:
        TopicLayout(namespace)
    except (TopicError, TypeError) as exc:
        raise AclSpecError(f"namespace: {exc}") from None
    entries = data.get("principal", [])
    if not isinstance(entries, list) or not entries:
        raise AclSpecError("no [[principal]] given")
    principals: list[Principal] = []
    names: set[str] = set()
    owners: dict[str, str] = {}
    for i, entry in enumerate(entries):
        where = f"principal[{i}]"
        if not isinstance(entry, dict):
            raise AclSpecError(f"{where}: must be a table")
        name = _check_client_id(entry.get("name"), f"{where}.name", "principal name")
        where = f"{where} {name!r}"
        unknown = sorted(set(entry) - set(_PRINCIPAL_KEYS))
        if unknown:
            raise AclSpecError(f"{where}: unknown key(s) {unknown} (allowed: {', '.join(_PRINCIPAL_KEYS)})")
        if name in names:
            raise AclSpecError(f"{where}: duplicate principal name")
        names.add(name)
        ids = entry.get("client_ids", [name])
        if not isinstance(ids, list) or not ids:
            raise AclSpecError(f"{where}.client_ids: must be a non-empty list of client ids")
        for cid in ids:
            _check_client_id(cid, f"{where}.client_ids")
            if cid in owners:
                raise AclSpecError(f"{where}.client_ids: client id {cid!r} already belongs to principal {owners[cid]!r}")
            owners[cid] = name
        principals.append(Principal(
            name=name,
            client_ids=tuple(ids),
            publish=_prefixes(entry.get("publish", []), f"{where}.publish", publish=True),
            subscribe=_prefixes(entry.get("subscribe", []), f"{where}.subscribe", publish=False),
            stores=_roles(entry.get("stores", {}), f"{where}.stores", STORE_ROLES),
            queues=_roles(entry.get("queues", {}), f"{where}.queues", QUEUE_ROLES),
            master_stores=_roles(entry.get("master_stores", {}), f"{where}.master_stores", MASTER_STORE_ROLES),
        ))
    return AclSpec(namespace=namespace, principals=tuple(principals))


# -- grants -------------------------------------------------------------------------------------


def _levels(prefix: str) -> str:
    """``/a/b`` -> ``a/b/`` (ready to be followed by ``#`` or a last level); ``/`` -> ``""``."""
    return "".join(level + "/" for level in prefix.strip("/").split("/") if level)


def _client_grants(ns: str, p: Principal, c: str) -> Iterator[tuple[Access, str]]:
    R, W = Access.READ, Access.WRITE

    def write_prefix(prefix: str) -> Iterator[tuple[Access, str]]:
        yield W, f"{ns}/d/{c}/{_levels(prefix)}#"
        yield W, f"{ns}/u/+/{c}/{_levels(prefix)}#"

    def write_exact(topic: str) -> Iterator[tuple[Access, str]]:
        yield W, f"{ns}/d/{c}/{topic}"
        yield W, f"{ns}/u/+/{c}/{topic}"

    def read_prefix(prefix: str) -> Iterator[tuple[Access, str]]:
        yield R, f"{ns}/d/+/{_levels(prefix)}#"

    def read_exact(topic: str) -> Iterator[tuple[Access, str]]:
        # "/#": what an endpoint subscribes to receive a topic (prefix semantics; "#" matches the level itself)
        yield R, f"{ns}/d/+/{topic}/#"

    def elected(store: str, role: str) -> Iterator[tuple[Access, str]]:
        base = f"$store/{store}"
        if role == "member":
            for kind in ("e", "em", "ew", "ea"):
                yield from write_exact(f"{base}/{kind}")
            yield from read_prefix(base)
            yield W, f"{ns}/actor/store/{store}/{c}"
            yield R, f"{ns}/actor/store/{store}/+"
        elif role == "writer":
            yield from write_exact(f"{base}/ew")
            yield from read_exact(f"{base}/em")
            yield from read_exact(f"{base}/ea")  # answers come by unicast, but the writer subscribes the topic
        else:  # reader
            yield from read_exact(f"{base}/e")
            yield from read_exact(f"{base}/em")

    yield W, f"{ns}/p/{c}"
    yield R, f"{ns}/p/+"
    yield R, f"{ns}/u/{_endpoint_hex(c)}/#"  # unicast topics name the receiving endpoint's id
    for prefix in p.publish:
        yield from write_prefix(prefix)
    for prefix in p.subscribe:
        yield from read_prefix(prefix)
    for store, role in p.stores:
        yield from elected(store, role)
    for queue, role in p.queues:
        yield from elected(f"queue-{queue}", "member" if role == "member" else "writer")
        if role == "member":
            yield from write_prefix(f"$queue/{queue}")
        yield from read_prefix(f"$queue/{queue}")
    for store, role in p.master_stores:
        base = f"$store/{store}"
        mine, theirs = (("m", "a"), ("c",)) if role == "master" else (("c",), ("m", "a"))
        for kind in mine:
            yield from write_exact(f"{base}/{kind}")
        for kind in theirs:
            yield from read_exact(f"{base}/{kind}")


def grants(spec: AclSpec) -> list[Grant]:
    """Every grant of ``spec``, in file order, without duplicates."""
    out: dict[Grant, None] = {}
    for p in spec.principals:
        for c in p.client_ids:
            for access, mqtt_filter in _client_grants(spec.namespace, p, c):
                out.setdefault(Grant(p.name, c, access, mqtt_filter), None)
    return list(out)


def _per_principal(all_grants: list[Grant]) -> dict[str, dict[str, set[Access]]]:
    """principal -> filter -> accesses, in first-seen order."""
    out: dict[str, dict[str, set[Access]]] = {}
    for g in all_grants:
        out.setdefault(g.principal, {}).setdefault(g.filter, set()).add(g.access)
    return out


# -- renderers ----------------------------------------------------------------------------------


def render_mosquitto(spec: AclSpec, all_grants: list[Grant]) -> str:
    """A mosquitto ``acl_file``: one ``user`` section per principal, grants only (nothing for
    anonymous clients). Use it with ``password_file`` (or ``use_identity_as_username`` for client
    certificates) and ``allow_anonymous false``."""
    lines = [
        f"# Generated by broker-mqtt acl for namespace {spec.namespace!r}: do not edit by hand.",
        "# mosquitto.conf: acl_file <this file>, password_file <file>, allow_anonymous false",
    ]
    if spec.binds_username_to_client_id():
        lines.append("# Every principal has one client id, its name: add use_username_as_clientid true")
    else:
        lines.append("# Some principal has several client ids (or one not its name): use_username_as_clientid")
        lines.append("# would break them; another principal can then take over their sessions (not publish as them).")
    for name, filters in _per_principal(all_grants).items():
        lines.append("")
        lines.append(f"user {name}")
        for mqtt_filter, accesses in filters.items():
            access = "readwrite" if len(accesses) == 2 else next(iter(accesses)).value
            lines.append(f"topic {access} {mqtt_filter}")
    return "\n".join(lines) + "\n"


def dynsec_password(password: str, *, salt: bytes | None = None, iterations: int = DYNSEC_ITERATIONS) -> dict[str, Any]:
    """The ``password``, ``salt`` and ``iterations`` fields of a dynamic-security client
    (PBKDF2-HMAC-SHA512 over a 12-byte salt, base64, as mosquitto_ctrl writes them)."""
    salt = os.urandom(12) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations)
    return {
        "password": base64.b64encode(digest).decode("ascii"),
        "salt": base64.b64encode(salt).decode("ascii"),
        "iterations": iterations,
    }


def render_dynsec(
    spec: AclSpec,
    all_grants: list[Grant],
    *,
    passwords: Mapping[str, str] | None = None,
    admin: str | None = None,
) -> dict[str, Any]:
    """A dynamic-security plugin configuration (``plugin_opt_config_file``) as a JSON-able dict.

    One client and one role (``<ns>:<name>``) per principal: a write grant becomes a
    ``publishClientSend`` ACL, a read grant a ``subscribePattern`` and a ``publishClientReceive``
    ACL; every default access is deny except unsubscribe. A principal with exactly one client id
    gets it as the client's ``clientid``, so no other device can connect as it. ``passwords``
    (principal -> clear text) are stored hashed; a client without one cannot connect until
    ``mosquitto_ctrl ... dynsec setClientPassword NAME`` (which needs ``admin``: a client of that
    name is added with the rights mosquitto_ctrl's own ``dynsec init`` gives its admin).
    """
    passwords = passwords or {}
    unknown = sorted(set(passwords) - {p.name for p in spec.principals} - ({admin} if admin else set()))
    if unknown:
        raise AclSpecError(f"passwords given for unknown principal(s) {unknown}")
    clients: list[dict[str, Any]] = []
    roles: list[dict[str, Any]] = []
    by_principal = _per_principal(all_grants)
    for p in spec.principals:
        role = f"{spec.namespace}:{p.name}"
        client: dict[str, Any] = {"username": p.name, "textname": f"broker-mqtt principal {p.name}"}
        if len(p.client_ids) == 1:
            client["clientid"] = p.client_ids[0]
        if p.name in passwords:
            client.update(dynsec_password(passwords[p.name]))
        client["roles"] = [{"rolename": role}]
        clients.append(client)
        acls: list[dict[str, Any]] = []
        for mqtt_filter, accesses in by_principal.get(p.name, {}).items():
            if Access.WRITE in accesses:
                acls.append({"acltype": "publishClientSend", "topic": mqtt_filter, "allow": True})
            if Access.READ in accesses:
                acls.append({"acltype": "subscribePattern", "topic": mqtt_filter, "allow": True})
                acls.append({"acltype": "publishClientReceive", "topic": mqtt_filter, "allow": True})
        roles.append({"rolename": role, "acls": acls})
    if admin is not None:
        _check_name(admin, "admin", "admin user name")
        if admin in by_principal:
            raise AclSpecError(f"admin {admin!r} is also a principal: give the admin its own name")
        control = "$CONTROL/dynamic-security/#"
        client = {"username": admin, "textname": "dynamic-security admin"}
        if admin in passwords:
            client.update(dynsec_password(passwords[admin]))
        client["roles"] = [{"rolename": "dynsec-admin"}]
        clients.append(client)
        roles.append({"rolename": "dynsec-admin", "acls": [
            {"acltype": "publishClientSend", "topic": control, "allow": True},
            {"acltype": "publishClientReceive", "topic": control, "allow": True},
            {"acltype": "subscribePattern", "topic": control, "allow": True},
        ]})
    return {
        "defaultACLAccess": {
            "publishClientSend": False,
            "publishClientReceive": False,
            "subscribe": False,
            "unsubscribe": True,
        },
        "clients": clients,
        "groups": [],
        "roles": roles,
    }


def _endpoint_hex(client_id: str) -> str:
    endpoint = endpoint_id(client_id)
    if endpoint is None:  # the principal checks refuse such client ids first
        raise AclSpecError(f"client id {client_id!r} names no endpoint")
    return endpoint.hex
