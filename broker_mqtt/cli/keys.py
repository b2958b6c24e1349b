"""``broker-mqtt keys``: Ed25519 key files, key records and trust files for signed messages.

Formats in docs/signing.md: a key file is PEM PKCS#8 (mode 0600); public keys are printed and written
as standard base64 of their 32 raw bytes; a key record is the binary :class:`KeyRecord` wire form, to
publish retained on ``<ns>/k/<identity>``; a trust file is TOML (``fleet_key``, ``[keys]``).

Exit codes: 0 success; 2 usage errors, including an unreadable or malformed key or trust file.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..errors import UsageError
from ..transport.keyfiles import load_private_key, save_private_key
from ..wire.signing import (
    KeyRecord,
    TrustStore,
    generate_private_key,
    public_key_from_b64,
    public_key_to_b64,
)
from .common import fail

__all__ = ["keys"]


@click.group()
def keys() -> None:
    """Ed25519 keys for signed node messages (docs/signing.md)."""


@keys.command("generate")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The new key file (PEM PKCS#8, mode 0600).")
@click.option("--force", is_flag=True, help="Replace an existing key file.")
def generate(out: Path, force: bool) -> None:
    """Generate a private key into the --out file; print its public key (base64)."""
    key = generate_private_key()
    try:
        save_private_key(out, key, overwrite=force)
    except UsageError as exc:
        fail(str(exc), 2)
    click.echo(public_key_to_b64(key))


@keys.command("public")
@click.argument("keyfile", type=click.Path(dir_okay=False, path_type=Path))
def public(keyfile: Path) -> None:
    """Print the public key (base64) of KEYFILE."""
    try:
        click.echo(public_key_to_b64(load_private_key(keyfile)))
    except UsageError as exc:
        fail(str(exc), 2)


@keys.command("sign-record")
@click.option("--fleet-key", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The fleet's private key file.")
@click.option("--identity", required=True, help="The endpoint's MQTT client id.")
@click.option("--public-key", "public_key", required=True, help="The endpoint's public key (base64).")
@click.option("--valid-days", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Expire the record this many days from now (default: never).")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the signed record (binary).")
def sign_record(fleet_key: Path, identity: str, public_key: str, valid_days: float | None, out: Path) -> None:
    """Sign a key record: the fleet key vouches that IDENTITY signs with PUBLIC_KEY.

    Publish it retained on <ns>/k/<identity>, e.g. mosquitto_pub -r -t bm/k/gw7 -f FILE.
    """
    try:
        fleet = load_private_key(fleet_key)
        raw = public_key_from_b64(public_key).public_bytes_raw()
        issued = int(time.time())
        not_after = None if valid_days is None else issued + int(valid_days * 86400)
        data = KeyRecord(identity, raw, issued, not_after).sign(fleet)
        out.write_bytes(data)
    except UsageError as exc:
        fail(str(exc), 2)
    except OSError as exc:
        fail(f"{out}: {exc.strerror or exc}", 2)
    click.echo(f"wrote {out}: {identity} signs with {public_key}, issued {issued}"
               + ("" if not_after is None else f", valid until {not_after}"))


@keys.command("trust-file")
@click.argument("pairs", nargs=-1, metavar="IDENTITY=PUBLIC_KEY...")
@click.option("--fleet-key", "fleet_key", default=None,
              help="The fleet's public key (base64), or a private key file to take it from.")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Write the trust file here (default: print it).")
def trust_file(pairs: tuple[str, ...], fleet_key: str | None, out: Path | None) -> None:
    """Build a trust file from IDENTITY=PUBLIC_KEY pairs (and a fleet key)."""
    try:
        store = TrustStore()
        if fleet_key is not None:
            store.fleet_key = (load_private_key(fleet_key).public_key() if Path(fleet_key).is_file()
                               else public_key_from_b64(fleet_key))
        for pair in pairs:
            # a 32-byte key is 44 base64 characters: split there, as an identity may hold "=" too
            identity, sep, b64 = (pair[:-45], "=", pair[-44:]) if pair[-45:-44] == "=" else pair.partition("=")
            if not sep:
                raise UsageError(f"{pair!r} is not IDENTITY=PUBLIC_KEY")
            store.add(identity, public_key_from_b64(b64))
        if len(store) == 0 and store.fleet_key is None:
            raise UsageError("give at least one IDENTITY=PUBLIC_KEY pair or --fleet-key")
        text = store.to_toml()
        if out is None:
            click.echo(text, nl=False)
        else:
            out.write_text(text, encoding="utf-8")
    except UsageError as exc:
        fail(str(exc), 2)
    except OSError as exc:
        fail(f"{out}: {exc.strerror or exc}", 2)
