"""Write docs/api.md, the API reference, from the public names and docstrings of the packages.

    python docs/gen_api.py          # rewrite docs/api.md
    python docs/gen_api.py --check  # exit 1 if docs/api.md is not what the code says (the tests run this)

For every name in a package's ``__all__``: its kind, its signature (classes: the constructor's), and
the first paragraph of its docstring; for classes also their public methods and properties.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

PACKAGES = ["broker_mqtt", "broker_mqtt.transport", "broker_mqtt.election", "broker_mqtt.store", "broker_mqtt.queue", "broker_mqtt.spark", "asyncactor"]
OUT = Path(__file__).resolve().parent / "api.md"


def _first_paragraph(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def _signature(obj: Any) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    return re.sub(r" at 0x[0-9a-f]+>", ">", text)  # default functions: no run-dependent addresses


def _members(cls: type) -> list[str]:
    lines = []
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_") or name in ("KIND",):
            continue
        if isinstance(member, property):
            lines.append(f"  - `{name}` (property): {_first_paragraph(member)}".rstrip(": "))
        elif inspect.isfunction(member) or inspect.iscoroutinefunction(member):
            prefix = "async " if inspect.iscoroutinefunction(member) else ""
            lines.append(f"  - `{prefix}{name}{_signature(member)}`: {_first_paragraph(member)}".rstrip(": "))
    return lines


def _entry(name: str, obj: Any) -> list[str]:
    if inspect.isclass(obj):
        kind = "enum" if issubclass(obj, enum.Enum) else "exception" if issubclass(obj, BaseException) else "class"
        sig = "" if kind == "enum" else _signature(obj)
        out = [f"- **{name}** ({kind}) `{name}{sig}`: {_first_paragraph(obj)}".rstrip(": ")]
        if kind == "class":
            out += _members(obj)
        return out
    if inspect.isfunction(obj) or inspect.iscoroutinefunction(obj):
        prefix = "async " if inspect.iscoroutinefunction(obj) else ""
        return [f"- **{name}** (function) `{prefix}{name}{_signature(obj)}`: {_first_paragraph(obj)}".rstrip(": ")]
    return [f"- **{name}**: `{obj!r}`" if isinstance(obj, (str, int, float)) else f"- **{name}**"]


def render() -> str:
    out = ["# API reference", "",
           "Generated from the code by `python docs/gen_api.py` (the test suite checks that it is current).",
           "Each entry: the public name, its signature, the first paragraph of its docstring.", ""]
    for package in PACKAGES:
        module = importlib.import_module(package)
        out += [f"## `{package}`", "", _first_paragraph(module), ""]
        for name in sorted(getattr(module, "__all__", [])):
            if name.startswith("__"):
                continue
            out += _entry(name, getattr(module, name))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is out of date")
    args = p.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print("docs/api.md is out of date: run python docs/gen_api.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
