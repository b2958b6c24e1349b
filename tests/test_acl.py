"""``broker-mqtt acl``: the grants of a TOML of principals and roles, each rejection, and the generated
mosquitto ``acl_file`` and dynamic-security configuration enforced by a real mosquitto.

The live tests prove non-delivery with an event: the forbidden message is published first, then an
allowed marker on the same connection (QoS 1, so mosquitto handles them in order) that the watcher
also receives; once the marker arrives, the forbidden message would have arrived before it.
"""

from __future__ import annotations

import base64
import json
import subprocess
import tomllib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiomqtt
import anyio
import pytest
from click.testing import CliRunner

from broker_mqtt import EmbeddedBroker
from broker_mqtt.cli.acl_rules import (
    Access,
    AclSpecError,
    Grant,
    dynsec_password,
    grants,
    parse_spec,
    render_dynsec,
    render_mosquitto,
)
from broker_mqtt.cli.main import main
from broker_mqtt.wire.identity import endpoint_id

EXAMPLE = """\
namespace = "bm"
[[principal]]
name = "gw7"
publish = ["/sensors/gw7"]
subscribe = ["/commands"]
stores = { fleet = "writer" }
queues = { jobs = "consumer" }
master_stores = { cfg = "clone" }

[[principal]]
name = "core"
publish = ["/commands", "/secret"]
subscribe = ["/"]
stores = { fleet = "member" }
queues = { jobs = "member" }
master_stores = { cfg = "master" }
"""


def _spec(text: str = EXAMPLE) -> Any:
    return parse_spec(tomllib.loads(text))


def _of(all_grants: list[Grant], who: str, access: Access) -> set[str]:
    return {g.filter for g in all_grants if g.principal == who and g.access is access}


# -- grants -------------------------------------------------------------------------------------


def test_grants_of_a_client_role_principal() -> None:
    g = grants(_spec())
    assert _of(g, "gw7", Access.WRITE) == {
        "bm/p/gw7",
        "bm/d/gw7/sensors/gw7/#", "bm/u/+/gw7/sensors/gw7/#",
        "bm/d/gw7/$store/fleet/ew", "bm/u/+/gw7/$store/fleet/ew",          # store writer
        "bm/d/gw7/$store/queue-jobs/ew", "bm/u/+/gw7/$store/queue-jobs/ew",  # queue consumer
        "bm/d/gw7/$store/cfg/c", "bm/u/+/gw7/$store/cfg/c",                # clone
    }
    assert _of(g, "gw7", Access.READ) == {
        "bm/p/+", f"bm/u/{_hex('gw7')}/#", "bm/d/+/commands/#",
        "bm/d/+/$store/fleet/em/#", "bm/d/+/$store/fleet/ea/#",  # what a writer subscribes
        "bm/d/+/$store/queue-jobs/em/#", "bm/d/+/$store/queue-jobs/ea/#", "bm/d/+/$queue/jobs/#",
        "bm/d/+/$store/cfg/m/#", "bm/d/+/$store/cfg/a/#",
    }
    assert {g.client_id for g in g} == {"gw7", "core"}


def test_grants_of_a_member() -> None:
    g = grants(_spec())
    writes = _of(g, "core", Access.WRITE)
    for kind in ("e", "em", "ew", "ea"):
        assert {f"bm/d/core/$store/fleet/{kind}", f"bm/u/+/core/$store/fleet/{kind}"} <= writes
        assert f"bm/d/core/$store/queue-jobs/{kind}" in writes
    assert {"bm/actor/store/fleet/core", "bm/actor/store/queue-jobs/core",
            "bm/d/core/$queue/jobs/#", "bm/u/+/core/$queue/jobs/#",
            "bm/d/core/$store/cfg/m", "bm/d/core/$store/cfg/a"} <= writes
    assert not any(w.startswith(("bm/d/+", "bm/p/+", "bm/actor/store/fleet/+")) for w in writes)
    reads = _of(g, "core", Access.READ)
    assert {"bm/d/+/#", "bm/d/+/$store/fleet/#", "bm/actor/store/fleet/+",
            "bm/actor/store/queue-jobs/+", "bm/d/+/$store/cfg/c/#"} <= reads


def test_reader_and_several_client_ids() -> None:
    spec = _spec('namespace = "x"\n[[principal]]\nname = "r"\nclient_ids = ["r1", "r2"]\n'
                 'stores = { s = "reader" }\n')
    g = grants(spec)
    assert {(x.client_id, x.access, x.filter) for x in g} >= {
        ("r1", Access.READ, "x/d/+/$store/s/e/#"), ("r1", Access.READ, "x/d/+/$store/s/em/#"),
        ("r2", Access.WRITE, "x/p/r2"), ("r2", Access.READ, f"x/u/{_hex('r2')}/#"),
    }
    assert _of(g, "r", Access.WRITE) == {"x/p/r1", "x/p/r2"}
    assert not spec.binds_username_to_client_id()
    text = render_mosquitto(spec, g)
    assert "would break them" in text and "use_username_as_clientid true" not in text


def test_mosquitto_rendering() -> None:
    spec = _spec('[[principal]]\nname = "a"\npublish = ["/t"]\nsubscribe = ["/t"]\n')
    text = render_mosquitto(spec, grants(spec))
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert body == ["user a", "topic write bm/p/a", "topic read bm/p/+", f"topic read bm/u/{_hex('a')}/#",
                    "topic write bm/d/a/t/#", "topic write bm/u/+/a/t/#", "topic read bm/d/+/t/#"]
    assert "use_username_as_clientid true" in text
    spec = _spec('[[principal]]\nname = "a"\npublish = ["/t"]\nsubscribe = ["/t"]\nclient_ids = ["a"]\n'
                 '[[principal]]\nname = "b"\n')
    assert "topic read bm/p/+" in render_mosquitto(spec, grants(spec))


def test_dynsec_rendering_and_password_hash() -> None:
    spec = _spec()
    config = render_dynsec(spec, grants(spec), passwords={"gw7": "pw", "adm": "x"}, admin="adm")
    assert config["defaultACLAccess"] == {"publishClientSend": False, "publishClientReceive": False,
                                          "subscribe": False, "unsubscribe": True}
    gw7 = config["clients"][0]
    assert gw7["username"] == "gw7" and gw7["clientid"] == "gw7" and gw7["roles"] == [{"rolename": "bm:gw7"}]
    assert "password" in gw7 and "password" not in config["clients"][1]
    role = config["roles"][0]
    assert {"acltype": "publishClientSend", "topic": "bm/p/gw7", "allow": True} in role["acls"]
    assert {"acltype": "subscribePattern", "topic": f"bm/u/{_hex('gw7')}/#", "allow": True} in role["acls"]
    assert {"acltype": "publishClientReceive", "topic": f"bm/u/{_hex('gw7')}/#", "allow": True} in role["acls"]
    assert config["clients"][2]["username"] == "adm"
    # mosquitto_ctrl dynsec init's own output for admin/adminpw, salt and count as it wrote them
    known = dynsec_password("adminpw", salt=base64.b64decode("5573U7u5qsR3slrz"), iterations=101)
    assert known["password"] == ("YfP3GaHo8RamJ4AsoGj1+0pL1+77kOyZ4AisrxNaPYzK3bqJ4OfVuOqMTQIN2coTDwlMuB0qJ4JcZi"
                                 "+E42Dj9g==")
    with pytest.raises(AclSpecError, match="unknown principal"):
        render_dynsec(spec, grants(spec), passwords={"nobody": "x"})
    with pytest.raises(AclSpecError, match="also a principal"):
        render_dynsec(spec, grants(spec), admin="gw7")


# -- rejections ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("toml", "match"), [
    ('[[principal]]\nname = "a"\npublish = ["/"]', r"principal\[0\] 'a'.publish: '/': publishing on every"),
    ('[[principal]]\nname = "a"\npublish = [""]', "publishing on every topic"),
    ('[[principal]]\nname = "a"\npublish = ["$store/x"]', "internal topic"),
    ('[[principal]]\nname = "a"\npublish = ["/$queue/q"]', "internal topic"),
    ('[[principal]]\nname = "a"\nsubscribe = ["/$store/x"]', "internal topic"),
    ('[[principal]]\nname = "a"\npublish = ["/a/+"]', "wildcard"),
    ('[[principal]]\nname = "a"\npublish = "/a"', "must be a list"),
    ('[[principal]]\nname = "a/b"', r"principal\[0\].name: principal name 'a/b' must not contain"),
    ('[[principal]]\nname = "a+"', "must not contain"),
    ('[[principal]]\nname = "a#"', "must not contain"),
    ('[[principal]]\nname = "a b"', "whitespace"),
    ('[[principal]]\nname = "bm-1234"', "principal name 'bm-1234' starts with 'bm-'"),
    ('[[principal]]\nname = "bm-1234"\nclient_ids = ["x"]', "reserved"),
    ('[[principal]]\nname = "a"\nclient_ids = ["bm-x"]', r"'a'.client_ids: client id 'bm-x' starts with 'bm-'"),
    ('[[principal]]\nname = "a"\nclient_ids = ["x/y"]', "client id 'x/y' must not contain"),
    ('[[principal]]\nname = "a"\nclient_ids = []', "non-empty list"),
    ('[[principal]]\nname = "a"\n[[principal]]\nname = "b"\nclient_ids = ["a"]',
     r"principal\[1\] 'b'.client_ids: client id 'a' already belongs to principal 'a'"),
    ('[[principal]]\nname = "a"\nclient_ids = ["x", "x"]', "already"),
    ('[[principal]]\nname = "a"\n[[principal]]\nname = "a"\nclient_ids = ["a2"]', "duplicate principal"),
    ('[[principal]]\nname = "a"\nstores = { s = "owner" }', r"'a'.stores.s: unknown role 'owner' \(one of member"),
    ('[[principal]]\nname = "a"\nqueues = { q = "writer" }', r"queues.q: unknown role 'writer'"),
    ('[[principal]]\nname = "a"\nmaster_stores = { m = "member" }', "master_stores.m: unknown role"),
    ('[[principal]]\nname = "a"\nstores = { "s/t" = "member" }', "must not contain"),
    ('[[principal]]\nname = "a"\nstores = ["s"]', "must be a table"),
    ('[[principal]]\nname = "a"\npublsh = ["/x"]', r"principal\[0\] 'a': unknown key\(s\) \['publsh'\]"),
    ('namespce = "x"\n[[principal]]\nname = "a"', r"unknown top-level key\(s\) \['namespce'\]"),
    ('namespace = "$x"\n[[principal]]\nname = "a"', "namespace"),
    ('namespace = "x"', r"no \[\[principal\]\]"),
    ('[[principal]]\nclient_ids = ["a"]', "name must be a non-empty string"),
])
def test_rejections(toml: str, match: str) -> None:
    with pytest.raises(AclSpecError, match=match):
        parse_spec(tomllib.loads(toml))


def test_cli(tmp_path: Path) -> None:
    good = tmp_path / "acl.toml"
    good.write_text(EXAMPLE)
    runner = CliRunner()
    result = runner.invoke(main, ["acl", "check", str(good)])
    assert result.exit_code == 0, result.output
    assert "gw7 write bm/d/gw7/$store/fleet/ew" in result.output
    assert "use_username_as_clientid possible: yes" in result.output
    out = tmp_path / "acl"
    result = runner.invoke(main, ["acl", "generate", str(good), "--format", "mosquitto", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "user core\n" in out.read_text()
    passwords = tmp_path / "pw"
    passwords.write_text("# clear text\ngw7:secret\n")
    result = runner.invoke(main, ["acl", "generate", str(good), "--format", "dynsec", "--passwords",
                                  str(passwords)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["clients"][0]["iterations"] == 101
    bad = tmp_path / "bad.toml"
    bad.write_text('[[principal]]\nname = "a"\nstores = { s = "owner" }\n')
    result = runner.invoke(main, ["acl", "check", str(bad)])
    assert result.exit_code == 1 and "stores.s: unknown role 'owner'" in result.output
    bad.write_text("[[principal]\n")
    assert runner.invoke(main, ["acl", "check", str(bad)]).exit_code == 1
    result = runner.invoke(main, ["acl", "generate", str(good), "--format", "mosquitto", "--admin", "x"])
    assert result.exit_code == 2


# -- live, against a real mosquitto -------------------------------------------------------------

LIVE = """\
namespace = "{ns}"
[[principal]]
name = "gw7"
publish = ["/sensors/gw7"]
subscribe = ["/commands"]
stores = {{ fleet = "writer" }}

[[principal]]
name = "core"
publish = ["/commands", "/secret"]
subscribe = ["/"]
stores = {{ fleet = "member" }}
"""
PASSWORDS = {"gw7": "gw7-pw", "core": "core-pw"}
# mosquitto before 2.0.12 or so disconnects a client after refusing its PUBLISH when
# max_queued_messages is 0 ("unlimited", EmbeddedBroker's setting): its refusal path compares the
# client's queue length with the limit without the "> 0" guard and answers QUOTA_EXCEEDED. Any
# finite limit (the later line wins) keeps a refused client connected, as in production configs.
FINITE_QUEUE = "max_queued_messages 1000000\n"


@pytest.fixture(params=["acl_file", "dynsec"])
def secured(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator[tuple[EmbeddedBroker, str]]:
    """A mosquitto enforcing the generated rules of LIVE, as an acl_file or as dynamic security."""
    spec = parse_spec(tomllib.loads(LIVE.format(ns=namespace)))
    if request.param == "acl_file":
        passwd = tmp_path / "passwd"
        passwd.touch()
        for user, password in PASSWORDS.items():
            subprocess.run(["mosquitto_passwd", "-b", str(passwd), user, password], check=True)
        acl = tmp_path / "acl"
        acl.write_text(render_mosquitto(spec, grants(spec)))
        broker = EmbeddedBroker(password_file=str(passwd),
                                extra_config=f"acl_file {acl}\nuse_username_as_clientid true\n{FINITE_QUEUE}")
    else:
        config = tmp_path / "dynsec.json"
        config.write_text(json.dumps(render_dynsec(spec, grants(spec), passwords=PASSWORDS)))
        plugin = next((p for p in ("/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so",
                                   "/usr/lib/mosquitto_dynamic_security.so") if Path(p).exists()), None)
        if plugin is None:
            pytest.skip("mosquitto's dynamic security plugin is not installed")
        broker = EmbeddedBroker(extra_config=f"plugin {plugin}\nplugin_opt_config_file {config}\n{FINITE_QUEUE}")
        # EmbeddedBroker's "allow_anonymous true" would let anonymous clients in: dynsec refuses
        # clients without a username anyway (it authenticates every connection)
    with broker:
        yield broker, request.param


@asynccontextmanager
async def _client(broker: EmbeddedBroker, user: str, *, client_id: str | None = None,
                  password: str | None = None) -> AsyncIterator[aiomqtt.Client]:
    async with aiomqtt.Client(broker.host, broker.port, username=user,
                              password=PASSWORDS[user] if password is None else password,
                              identifier=client_id or user, protocol=aiomqtt.ProtocolVersion.V5) as c:
        yield c


class _Inbox:
    """Messages a client receives, waited for by topic."""

    def __init__(self, client: aiomqtt.Client) -> None:
        self.client = client
        self.seen: list[tuple[str, bytes]] = []
        self._changed = anyio.Event()

    async def run(self) -> None:
        async for m in self.client.messages:
            self.seen.append((str(m.topic), bytes(m.payload)))  # type: ignore[arg-type]
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_for(self, topic: str, payload: bytes) -> None:
        with anyio.fail_after(20):
            while (topic, payload) not in self.seen:
                await self._changed.wait()


@pytest.mark.anyio
@pytest.mark.mosquitto
async def test_live_rules_are_enforced(secured: tuple[EmbeddedBroker, str], namespace: str) -> None:
    broker, _kind = secured
    ns = namespace
    async with (
        _client(broker, "core") as core,
        _client(broker, "gw7") as gw7,
        anyio.create_task_group() as tg,
    ):
        watcher, device = _Inbox(core), _Inbox(gw7)
        tg.start_soon(watcher.run)
        tg.start_soon(device.run)
        for f in (f"{ns}/d/+/#", f"{ns}/p/+", f"{ns}/actor/store/fleet/+", f"{ns}/u/{_hex('core')}/#"):
            await core.subscribe(f, qos=1)
        await gw7.subscribe(f"{ns}/d/+/commands/#", qos=1)
        await gw7.subscribe(f"{ns}/d/+/secret/#", qos=1)  # not granted: refused or never delivered

        marker = 0

        async def forbidden_then_marker(topic: str, *, retain: bool = False) -> None:
            nonlocal marker
            marker += 1
            await gw7.publish(topic, b"forged", qos=1, retain=retain)
            await gw7.publish(f"{ns}/d/gw7/sensors/gw7/m", str(marker).encode(), qos=1)
            await watcher.wait_for(f"{ns}/d/gw7/sensors/gw7/m", str(marker).encode())
            assert (topic, b"forged") not in watcher.seen, f"{topic} was delivered"

        # what gw7 was given reaches the watcher
        for topic in (f"{ns}/d/gw7/sensors/gw7/t", f"{ns}/d/gw7/$store/fleet/ew", f"{ns}/p/gw7",
                      f"{ns}/u/{_hex('core')}/gw7/sensors/gw7/x", f"{ns}/u/{_hex('core')}/gw7/$store/fleet/ew"):
            await gw7.publish(topic, b"ok", qos=1)
            await watcher.wait_for(topic, b"ok")
        # and what it was not given does not
        await forbidden_then_marker(f"{ns}/d/gw7/$store/fleet/e")       # a writer replicating
        await forbidden_then_marker(f"{ns}/d/gw7/$store/fleet/em")      # ... or announcing a master
        await forbidden_then_marker(f"{ns}/d/core/sensors/gw7/t")       # data as another client
        await forbidden_then_marker(f"{ns}/d/core/$store/fleet/e")      # replication as a member
        await forbidden_then_marker(f"{ns}/d/gw7/sensors/other/t")      # outside its prefix
        await forbidden_then_marker(f"{ns}/p/core", retain=True)        # clearing another's presence
        await forbidden_then_marker(f"{ns}/actor/store/fleet/gw7")      # a non-member bidding
        await forbidden_then_marker(f"{ns}/actor/store/fleet/core")     # ... as a member
        await forbidden_then_marker(f"{ns}/u/{_hex('core')}/core/$store/fleet/ea")  # unicast as another sender
        await forbidden_then_marker(f"{ns}/u/{_hex('core')}/gw7/$store/fleet/ea")  # an answer only members send

        # reads: gw7 receives /commands, not /secret; it cannot read another's unicast
        await core.publish(f"{ns}/d/core/secret/x", b"hidden", qos=1)
        await core.publish(f"{ns}/u/{_hex('gw8')}/core/commands/y", b"not yours", qos=1)
        await core.publish(f"{ns}/d/core/commands/x", b"go", qos=1)
        await device.wait_for(f"{ns}/d/core/commands/x", b"go")
        assert [t for t, _ in device.seen] == [f"{ns}/d/core/commands/x"]
        # the member's own rights
        await core.publish(f"{ns}/d/core/$store/fleet/e", b"hb", qos=1)
        await core.publish(f"{ns}/actor/store/fleet/core", b"bid", qos=1)
        await watcher.wait_for(f"{ns}/actor/store/fleet/core", b"bid")
        assert (f"{ns}/d/core/$store/fleet/e", b"hb") in watcher.seen
        tg.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.mosquitto
async def test_live_client_id_is_bound(secured: tuple[EmbeddedBroker, str], namespace: str) -> None:
    """gw7 connecting with core's client id does not take over core's session: dynsec refuses it
    (the client's clientid), use_username_as_clientid renames it to gw7."""
    broker, kind = secured
    async with _client(broker, "core") as core, anyio.create_task_group() as tg:
        watcher = _Inbox(core)
        tg.start_soon(watcher.run)
        await core.subscribe(f"{namespace}/d/+/#", qos=1)
        if kind == "dynsec":
            with anyio.fail_after(20), pytest.raises(aiomqtt.MqttError):
                async with _client(broker, "gw7", client_id="core"):
                    pass
        else:
            async with _client(broker, "gw7", client_id="core") as gw7:
                await gw7.publish(f"{namespace}/d/gw7/sensors/gw7/t", b"as gw7", qos=1)
                await watcher.wait_for(f"{namespace}/d/gw7/sensors/gw7/t", b"as gw7")
        # core's connection is the one it had: a takeover would have closed it before this reply
        await core.publish(f"{namespace}/d/core/commands/alive", b"yes", qos=1)
        await watcher.wait_for(f"{namespace}/d/core/commands/alive", b"yes")
        tg.cancel_scope.cancel()
    with anyio.fail_after(20), pytest.raises(aiomqtt.MqttError):
        async with _client(broker, "gw7", password="wrong"):
            pass


def _hex(client_id: str) -> str:
    """The endpoint id (hex) that client id names: what its unicast topics carry."""
    endpoint = endpoint_id(client_id)
    assert endpoint is not None
    return endpoint.hex
