"""A Spark standalone cluster for tests: a master and one worker started from pyspark's own
``spark-class`` (shipped in the pyspark wheel; nothing downloaded), and a driver process that runs
jobs on it (tests/spark/cluster_job.py).

Everything listens on loopback, on free ports (never Spark's defaults 7077/8080/8081: other test
runs may share the machine). Each process runs in its own process group (``start_new_session``), so
that stopping it also stops what it started (the worker's executor JVM and its Python workers), and
with ``PR_SET_PDEATHSIG`` (Linux) so that it dies with the test process even when that one is killed
and no teardown runs.

A SparkSession on the cluster cannot live in the test process next to the suite's local session
(one JVM gateway per Python process): the driver is a child process, driven by JSON lines.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
START_TIMEOUT = 120.0  #: seconds for the master to answer and the worker to register (a busy machine)

# Runs argv[2:] with PR_SET_PDEATHSIG = SIGKILL: the process dies with its parent (argv[1], the test
# process). The setting survives exec (spark-class execs the JVM), so the pid the test holds is the
# JVM's, and pdeathsig is set before anything else runs (no preexec_fn in a threaded test process).
_DIE_WITH_PARENT = """\
import ctypes, os, signal, sys
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != int(sys.argv[1]):
        sys.exit("parent already gone")
os.execvp(sys.argv[2], sys.argv[2:])
"""

# urllib honours http_proxy; the master's JSON is on loopback
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def cluster_env(work: Path) -> dict[str, str]:
    """The environment of the master, the worker (and so the executors) and the driver."""
    from broker_mqtt.spark import ensure_java

    java_home = ensure_java()  # the worker launches executors with $JAVA_HOME/bin/java too
    return {
        **os.environ,
        "JAVA_HOME": java_home,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(work),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def _spawn(cmd: list[str], *, env: dict[str, str], cwd: Path, stdout: Any, stderr: Any,
           stdin: Any = subprocess.DEVNULL, text: bool = False) -> subprocess.Popen[Any]:
    return subprocess.Popen(
        [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *cmd],
        stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd, text=text, start_new_session=True)


def stop_group(proc: subprocess.Popen[Any], grace: float = 20.0) -> None:
    """SIGTERM to the process's group, SIGKILL to what is left of it after ``grace`` seconds."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the leader's children (executors) too
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Daemon:
    """One ``spark-class`` process (master or worker); its output goes to ``log``."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], base: Path) -> None:
        self.name = name
        self.log = base / f"{name}.log"
        with open(self.log, "wb") as out:
            self.proc = _spawn([str(spark_home() / "bin" / "spark-class"), *args], env=env, cwd=base,
                               stdout=out, stderr=subprocess.STDOUT)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the Spark {self.name} exited ({self.proc.returncode}):\n{_tail(self.log)}")

    def stop(self) -> None:
        stop_group(self.proc)


class SparkCluster:
    """A standalone master and one worker (2 cores, 1 GiB) on loopback; ``url`` is the master's."""

    def __init__(self, base: Path, *, cores: int = 2, memory: str = "1g") -> None:
        self.base = base
        self.env = cluster_env(base / "local")
        (base / "local").mkdir(exist_ok=True)
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.cores = cores
        self.daemons: list[Daemon] = []
        try:
            # the REST submission server (port 6066) is off by default in Spark 4: keep it off
            master_env = {**self.env, "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
            self.daemons.append(Daemon("master", [
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
                "--webui-port", str(self.ui_port)], master_env, base))
            # A worker that finds no master retries only after 5-15 s: start it once the master listens.
            self._wait(self._master_listens, "the master to accept connections")
            self.daemons.append(Daemon("worker", [
                "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                "--work-dir", str(base / "work")], self.env, base))
            self._wait(self._worker_registered, "the worker to register with the master")
        except BaseException:
            self.stop()
            raise

    def _master_listens(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                return True
        except OSError:
            return False

    def state(self) -> dict[str, Any] | None:
        """The master's JSON status page, or None while it does not answer."""
        try:
            with _NO_PROXY.open(f"http://127.0.0.1:{self.ui_port}/json", timeout=5) as response:
                state: dict[str, Any] = json.load(response)
                return state
        except (OSError, ValueError):
            return None

    def _worker_registered(self) -> bool:
        state = self.state()
        return state is not None and any(
            w.get("state") == "ALIVE" and w.get("cores") == self.cores for w in state.get("workers", ()))

    def _wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not condition():
            for d in self.daemons:
                d.check_alive()
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {d.name}:\n{_tail(d.log)}" for d in self.daemons)
                raise TimeoutError(f"waited {START_TIMEOUT:.0f} s for {what}\n{logs}")
            time.sleep(0.2)

    def executor_logs(self) -> str:
        """The tails of the executors' stderr files (work/<app>/<executor>/stderr)."""
        return "\n".join(f"--- {p}:\n{_tail(p)}" for p in sorted((self.base / "work").glob("*/*/stderr")))

    def stop(self) -> None:
        for d in reversed(self.daemons):  # the worker (and its executors) first
            d.stop()


class JobFailed(RuntimeError):
    pass


class ClusterDriver:
    """tests/spark/cluster_job.py connected to ``cluster``: one Spark application (its executors stay up
    between requests). :meth:`request` sends one JSON line; :meth:`expect` returns the next answer."""

    def __init__(self, cluster: SparkCluster, base: Path, timeout: float = 180.0) -> None:
        self.cluster = cluster
        self.log = base / "driver.log"
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        with open(self.log, "wb") as err:
            self.proc = _spawn([sys.executable, str(HERE / "cluster_job.py"), cluster.url, str(base)],
                               env=cluster.env, cwd=base, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=err, text=True)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self._stdin: IO[str] = self.proc.stdin
        self._thread = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._thread.start()
        try:
            self.ready = self.expect("ready", timeout)
        except BaseException:
            self.close()
            raise

    def _read(self, stdout: IO[str]) -> None:
        # Spark's JVM shares the driver's stdout: answers are the lines marked RESULT
        for line in stdout:
            if line.startswith("RESULT "):
                self._answers.put(json.loads(line[len("RESULT "):]))
        self._answers.put(None)

    def _failure(self, message: str) -> JobFailed:
        return JobFailed(f"{message}\n--- driver:\n{_tail(self.log)}\n{self.cluster.executor_logs()}")

    def request(self, op: str, **args: Any) -> None:
        self._stdin.write(json.dumps({"op": op, **args}) + "\n")
        self._stdin.flush()

    def expect(self, event: str, timeout: float = 180.0) -> dict[str, Any]:
        try:
            answer = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise self._failure(f"no answer {event!r} from the driver within {timeout:.0f} s") from None
        if answer is None:
            raise self._failure(f"the driver exited ({self.proc.poll()}) before answering {event!r}")
        if answer.get("event") == "error":
            raise self._failure(f"the driver failed:\n{answer.get('error')}")
        assert answer.get("event") == event, answer
        return answer

    def run(self, op: str, event: str, timeout: float = 180.0, **args: Any) -> dict[str, Any]:
        self.request(op, **args)
        return self.expect(event, timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.request("quit")
                self._stdin.close()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                pass
        stop_group(self.proc, grace=10.0)
        self._thread.join(10)  # it ends at the pipe's EOF; then the pipe may be closed
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
