"""``broker-mqtt acl ...``: broker access control from a TOML of principals and roles.

``acl generate FILE.toml --format mosquitto|dynsec [--out PATH]`` writes a mosquitto ``acl_file``
or a dynamic-security plugin configuration; ``acl check FILE.toml`` validates the file and prints
what each principal is granted. The format and the rules: docs/security.md § Broker ACLs and
:mod:`.acl_rules`. Exit codes: 0 success, 1 the file is wrong (the message names the key), 2 usage.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import click

from .acl_rules import (
    Access,
    AclSpec,
    AclSpecError,
    Grant,
    grants,
    parse_spec,
    render_dynsec,
    render_mosquitto,
)
from .common import fail


def _load(path: str) -> tuple[AclSpec, list[Grant]]:
    try:
        with Path(path).open("rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        fail(f"cannot read {path}: {exc}", 1)
    except tomllib.TOMLDecodeError as exc:
        fail(f"{path}: {exc}", 1)
    try:
        spec = parse_spec(data)
    except AclSpecError as exc:
        fail(f"{path}: {exc}", 1)
    return spec, grants(spec)


def _read_passwords(path: str) -> dict[str, str]:
    """``user:password`` lines (the clear-text form ``mosquitto_passwd -U`` reads); ``#`` comments."""
    out: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {path}: {exc}", 1)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            fail(f"{path}:{number}: expected user:password", 1)
        out[user] = password
    return out


@click.group()
def acl() -> None:
    """Broker ACLs from a TOML of principals and roles (docs/security.md § Broker ACLs)."""


@acl.command("generate")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["mosquitto", "dynsec"]), required=True,
              help="mosquitto: an acl_file; dynsec: a dynamic-security plugin config (JSON).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write here instead of stdout.")
@click.option("--passwords", type=click.Path(dir_okay=False), default=None,
              help="dynsec: user:password lines; stored hashed (else set with mosquitto_ctrl dynsec setClientPassword).")
@click.option("--admin", default=None, help="dynsec: add an admin client of this name for mosquitto_ctrl.")
def generate(file: str, fmt: str, out: str | None, passwords: str | None, admin: str | None) -> None:
    """Generate broker access control from FILE (TOML)."""
    spec, all_grants = _load(file)
    if fmt == "mosquitto":
        if passwords or admin:
            fail("--passwords and --admin apply to --format dynsec (use mosquitto_passwd for acl_file)", 2)
        text = render_mosquitto(spec, all_grants)
    else:
        try:
            config: dict[str, Any] = render_dynsec(
                spec, all_grants, passwords=_read_passwords(passwords) if passwords else None, admin=admin
            )
        except AclSpecError as exc:
            fail(str(exc), 1)
        text = json.dumps(config, indent=2) + "\n"
    if out is None:
        click.echo(text, nl=False)
    else:
        Path(out).write_text(text, encoding="utf-8")


@acl.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
def check(file: str) -> None:
    """Validate FILE and print each principal's client ids and grants."""
    spec, all_grants = _load(file)
    for p in spec.principals:
        mine = [g for g in all_grants if g.principal == p.name]
        writes = sum(1 for g in mine if g.access is Access.WRITE)
        click.echo(f"{p.name}: client ids {', '.join(p.client_ids)}; {writes} write and "
                   f"{len(mine) - writes} read grants")
        for g in mine:
            click.echo(f"  {g.client_id} {g.access.value:5} {g.filter}")
    bound = "yes" if spec.binds_username_to_client_id() else "no (a principal has other client ids)"
    click.echo(f"use_username_as_clientid possible: {bound}")
