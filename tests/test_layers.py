"""The architecture, pinned (docs/architecture.md): layers import only downwards, no import cycles
(imports inside functions and under TYPE_CHECKING included), `asyncactor` imports nothing from
`broker_mqtt`, and no module holds more than 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("asyncactor", "broker_mqtt")
MAX_LINES = 600

#: broker_mqtt's layers, lowest first: a module may import from its own layer and the ones below.
#: ``broker_mqtt/__init__`` (the re-exports) sits above them all, so no module may import it.
LAYERS: list[tuple[str, ...]] = [
    ("broker_mqtt._version", "broker_mqtt.errors"),
    ("broker_mqtt.wire",),
    ("broker_mqtt.transport",),
    ("broker_mqtt.endpoint",),
    ("broker_mqtt.channel", "broker_mqtt.election"),
    ("broker_mqtt.store",),
    ("broker_mqtt.queue",),
    ("broker_mqtt.spark",),
    ("broker_mqtt.cli", "broker_mqtt.__main__"),
]


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> set[str]:
    """The project modules ``module`` imports, anywhere in its body."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{alias.name}" for alias in node.names]
        for target in targets:
            resolved = _resolve(target)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


GRAPH = {module: _imports(module) for module in MODULES}


def _layer(module: str) -> int | None:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def test_every_broker_mqtt_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if m.startswith("broker_mqtt.") and _layer(m) is None]
    assert unplaced == []


def test_layers_import_only_downwards() -> None:
    upward = []
    for module, imported in GRAPH.items():
        if not module.startswith("broker_mqtt"):
            continue
        for target in imported:
            if target == "broker_mqtt" and module != "broker_mqtt":
                upward.append(f"{module} -> broker_mqtt (the package's re-exports: import the module)")
                continue
            mine, theirs = _layer(module), _layer(target)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{module} (layer {mine}) -> {target} (layer {theirs})")
    assert upward == []


def test_asyncactor_stands_alone() -> None:
    reaching = sorted(
        f"{m} -> {t}" for m, ts in GRAPH.items() if m.split(".")[0] == "asyncactor" for t in ts
        if t.split(".")[0] == "broker_mqtt"
    )
    assert reaching == []


def test_no_import_cycles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in MODULES:
        if module not in index:
            visit(module)
    assert cycles == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_holds_one_idea(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module]} has {lines} lines: split it"


def test_the_checks_see_a_cycle_and_an_upward_import() -> None:
    """The checks above can fail: a graph with a cycle and an upward import is caught."""
    saved = dict(GRAPH)
    try:
        GRAPH["broker_mqtt.wire.codec"] = GRAPH["broker_mqtt.wire.codec"] | {"broker_mqtt.endpoint.endpoint"}
        with pytest.raises(AssertionError):
            test_layers_import_only_downwards()
        with pytest.raises(AssertionError):
            test_no_import_cycles()
    finally:
        GRAPH.clear()
        GRAPH.update(saved)
