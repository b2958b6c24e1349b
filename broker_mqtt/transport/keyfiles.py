"""Key and trust files on disk: the I/O half of :mod:`broker_mqtt.wire.signing` (docs/signing.md).

- A *key file* holds one Ed25519 private key, PEM PKCS#8 unencrypted (``-----BEGIN PRIVATE KEY-----``,
  what ``openssl genpkey -algorithm ed25519`` writes), readable by its owner only: it is created with
  mode 0600 and, on POSIX, refused when group or others may read it (as ssh refuses a private key).
- A *trust file* is TOML: ``fleet_key = "<base64>"`` (optional) and a ``[keys]`` table of
  ``identity = "<base64 raw public key>"``.

Errors are :class:`~broker_mqtt.wire.signing.TrustFileError` (a usage error) naming the file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..wire.signing import TrustFileError, TrustStore, private_key_from_pem, private_key_to_pem

__all__ = ["save_private_key", "load_private_key", "load_trust_file"]


def save_private_key(path: str | os.PathLike[str], key: Ed25519PrivateKey, *, overwrite: bool = False) -> None:
    """Write ``key`` to a new key file with mode 0600. Refuses an existing file unless ``overwrite``
    (then the file is replaced atomically, never left half written)."""
    target = Path(path)
    data = private_key_to_pem(key)
    if not overwrite:
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise TrustFileError(f"{target}: exists; not overwriting a key file") from None
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Read a key file; :class:`TrustFileError` if it is missing, readable by others, or not an Ed25519
    PEM PKCS#8 key."""
    target = Path(path)
    try:
        mode = target.stat().st_mode
        data = target.read_bytes()
    except OSError as exc:
        raise TrustFileError(f"{target}: cannot read the key file: {exc.strerror or exc}") from None
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TrustFileError(f"{target}: the key file is accessible to group or others "
                             f"(mode {stat.S_IMODE(mode):o}); run: chmod 600 {target}")
    try:
        return private_key_from_pem(data)
    except TrustFileError as exc:
        raise TrustFileError(f"{target}: {exc}") from None


def load_trust_file(path: str | os.PathLike[str]) -> TrustStore:
    """Read and parse a trust file (:meth:`TrustStore.from_toml`)."""
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrustFileError(f"{target}: cannot read the trust file: {exc}") from None
    return TrustStore.from_toml(text, source=str(target))
