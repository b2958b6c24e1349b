"""The architecture, pinned (docs/architecture.md): layers import only downwards, no import cycles
(imports inside functions and under TYPE_CHECKING included), `asyncactor` imports nothing from
`broker_mqtt`, the sans-io cores import no I/O, clock or event loop, and no module holds more than
600 lines."""

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
    ("broker_mqtt._version", "broker_mqtt.errors", "broker_mqtt.collector"),
    ("broker_mqtt.wire",),
    ("broker_mqtt.transport",),
    ("broker_mqtt.endpoint",),
    ("broker_mqtt.channel", "broker_mqtt.election"),
    ("broker_mqtt.store",),
    ("broker_mqtt.queue",),
    ("broker_mqtt.spark",),
    ("broker_mqtt.metrics",),
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


def _imports(module: str, external: set[str] | None = None) -> set[str]:
    """The project modules ``module`` imports, anywhere in its body; the top-level names of the other
    modules it imports (stdlib, third party) go to ``external``."""
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
            elif resolved is None and external is not None and not (isinstance(node, ast.ImportFrom)
                                                                     and node.level):
                external.add(target.partition(".")[0])
    return found


#: module -> the top-level names of the non-project modules it imports (anywhere in its body)
EXTERNAL: dict[str, set[str]] = {module: set() for module in MODULES}
GRAPH = {module: _imports(module, EXTERNAL[module]) for module in MODULES}

#: What a sans-io core must not import, directly or through project modules: an event loop, the
#: clock, a file or a socket (STYLE.md). The cores take time and persistence as arguments.
IO_MODULES = frozenset({"anyio", "trio", "asyncio", "time", "sqlite3", "socket"})

#: The sans-io cores. Left out, though free today: ``asyncactor.transport`` (the seam to an I/O
#: transport, not a core). Implicit imports of parent packages (``broker_mqtt.store/__init__``
#: re-exports the I/O layers) are not counted: only what the modules import themselves.
SANS_IO = sorted({
    *(m for m in MODULES if m == "broker_mqtt.wire" or m.startswith("broker_mqtt.wire.")),
    *(m for m in MODULES if m == "broker_mqtt.channel" or m.startswith("broker_mqtt.channel.")),
    *(f"broker_mqtt.store.{m}" for m in (
        "master", "clone", "commands", "replication", "replica_base", "replica_claim", "replica_events",
        "replica_follower", "replica_master", "replica_messages", "versioned", "history", "writer_core",
        "record_log", "packing", "backend")),
    "broker_mqtt.queue.model", "broker_mqtt.queue.commands", "broker_mqtt.queue.record_sizes",
    "broker_mqtt.endpoint.dispatch", "broker_mqtt.endpoint.presence", "broker_mqtt.endpoint.outbox",
    "broker_mqtt.endpoint.backoff",
    "broker_mqtt.endpoint.sequence", "broker_mqtt.spark.topic_pattern", "broker_mqtt.spark.json_rows",
    "broker_mqtt.transport.failover",
    "broker_mqtt.transport.memory_broker",
    "broker_mqtt.spark.sparkplug", "broker_mqtt.spark.sparkplug_wire",
    *(f"asyncactor.{m}" for m in (
        "protocol", "core_state", "pinging", "succession", "healing", "history", "messages", "collision",
        "config", "events", "policy", "queue", "recovery", "state")),
})


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


def _io_reached(module: str) -> list[str]:
    """``"path -> ... -> module: name"`` for every I/O module ``module`` imports, directly or through
    project modules (the first path found to each importing module)."""
    paths = {module: [module]}
    todo = [module]
    while todo:
        current = todo.pop(0)
        for target in sorted(GRAPH[current]):
            if target not in paths:
                paths[target] = [*paths[current], target]
                todo.append(target)
    return [f"{' -> '.join(path)}: {name}" for m, path in paths.items() for name in sorted(EXTERNAL[m] & IO_MODULES)]


@pytest.mark.parametrize("module", SANS_IO)
def test_sans_io_core_imports_no_io(module: str) -> None:
    assert module in MODULES
    assert _io_reached(module) == []


def test_the_sans_io_check_sees_direct_and_transitive_io() -> None:
    """The check above can fail: a core importing ``time``, or a project module importing sqlite3."""
    saved_graph, saved_external = dict(GRAPH), {m: set(names) for m, names in EXTERNAL.items()}
    try:
        EXTERNAL["broker_mqtt.store.history"].add("time")
        assert _io_reached("broker_mqtt.store.history") == ["broker_mqtt.store.history: time"]
        GRAPH["broker_mqtt.wire.codec"] = GRAPH["broker_mqtt.wire.codec"] | {"broker_mqtt.store.sqlite_backend"}
        reached = _io_reached("broker_mqtt.store.replication")
        assert any(line.endswith("broker_mqtt.store.sqlite_backend: sqlite3") for line in reached)
        with pytest.raises(AssertionError):
            test_sans_io_core_imports_no_io("broker_mqtt.store.history")
    finally:
        GRAPH.clear()
        GRAPH.update(saved_graph)
        EXTERNAL.clear()
        EXTERNAL.update(saved_external)


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
