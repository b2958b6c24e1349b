"""Packaging: ``import asyncactor`` warns when the other ``asyncactor`` distribution is installed too.

Both it and ``broker-mqtt`` install a top-level package ``asyncactor``; the tests fake the other one's
metadata with a ``.dist-info`` folder on ``sys.path`` and run ``asyncactor/__init__.py`` again
(``importlib.reload``: its submodules stay as they are, so the package's names keep their objects).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import warnings
from pathlib import Path

import pytest

import asyncactor


def _fake_distribution(root: Path, name: str, version: str) -> None:
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_no_warning_without_the_other_distribution() -> None:
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("asyncactor")  # ours is broker-mqtt
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(asyncactor)


def test_warns_when_the_other_distribution_is_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_distribution(tmp_path, "asyncactor", "0.9")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(RuntimeWarning) as record:
        importlib.reload(asyncactor)
    assert len(record) == 1
    message = str(record[0].message)
    assert "'asyncactor' distribution (version 0.9) is installed beside 'broker-mqtt'" in message
    assert "pip uninstall asyncactor" in message and "separate virtual environments" in message


def test_a_distribution_of_another_name_is_no_reason_to_warn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_distribution(tmp_path, "asyncactor_tools", "1.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(asyncactor)
