"""A 2-node ejabberd cluster (its ``mod_mqtt`` speaks MQTT 5) on loopback, for tests/cluster/.

``with EjabberdCluster() as c:`` starts, in a private temporary directory:

- a private ``epmd`` on a free port (``ERL_EPMD_PORT``): the Erlang port mapper of this run only, so the
  host's epmd (and any other run's) is neither used nor disturbed;
- nodes ``ej1_<run>@localhost`` and ``ej2_<run>@localhost`` (``<run>``: random per run, so parallel runs and
  leftovers never clash), each with its own config, spool (mnesia) and log dirs, an MQTT listener on a free
  loopback port, and an Erlang distribution port fixed to another free port (``inet_dist_listen_min/max``,
  bound to 127.0.0.1); a private cookie (in ``$HOME/.erlang.cookie`` of the temporary dir, never on a command
  line);
- a hidden controller VM that evaluates Erlang expressions read from its stdin (registrations, join, the
  cluster's running nodes): one VM for the whole run instead of one ``ejabberdctl`` VM per command.

Node 2 joins node 1 (``ejabberd_cluster:join``, what ``ejabberdctl join_cluster`` calls), users ``u1``... are
registered (``auth_method: internal``; the MQTT username is ``u1@localhost``), and the start returns once the
cluster reports 2 running nodes and both listeners accept an authenticated MQTT CONNECT.

The nodes run as the calling user straight from ``erl`` (not through ``ejabberdctl``, whose bash would stay
between us and the VM): a kill is a real SIGKILL of the VM (:meth:`kill`), and the VM gets PDEATHSIG, so
nothing survives the test process. :meth:`restart` starts a killed node again on its ports and spool: it
rejoins the cluster by itself (mnesia remembers it). Everything is killed and removed on exit, also when
the start fails.

The config is minimal (one ``mod_mqtt`` listener, no XMPP listener, no other module) and schedulers do not
busy-wait (``+sbwt none``...): idle, a node here was measured at ~0.03% of a core (the package's default
config was seen at ~13%; docs/operations.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from broker_mqtt.transport.embedded import _free_port

__all__ = ["EjabberdCluster", "EjabberdError", "ejabberd_missing"]

HOST = "localhost"
EJABBERDCTL = "/usr/sbin/ejabberdctl"


class EjabberdError(RuntimeError):
    pass


def _erl_libs() -> str | None:
    """Where the Debian package keeps ejabberd's Erlang applications (ejabberdctl's ``ERL_LIBS``)."""
    ctl = shutil.which("ejabberdctl") or (EJABBERDCTL if os.access(EJABBERDCTL, os.X_OK) else None)
    if ctl is None:
        return None
    with contextlib.suppress(OSError):
        found = re.search(r"^ERL_LIBS=['\"]?([^'\"\n]+)", Path(ctl).read_text(), re.M)
        if found:
            return found.group(1)
    for d in sorted(Path("/usr/lib").glob("*/ejabberd-*/ebin")):
        return str(d.parent.parent)
    return None


def ejabberd_missing() -> str | None:
    """Why a cluster cannot start here (for a skip), or None."""
    if _erl_libs() is None:
        return "ejabberd is not installed (make ejabberd installs it)"
    for tool in ("erl", "epmd"):
        if shutil.which(tool) is None:
            return f"{tool} (Erlang) not found"
    return None


def _die_with_parent() -> None:  # in the child between fork and exec
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    os.setpgrp()  # its own process group: killed as one, untouched by a Ctrl-C in the terminal


def _wait(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise EjabberdError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


def _mqtt_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def mqtt_login(port: int, username: str, password: str, timeout: float = 5.0) -> int | None:
    """An MQTT 3.1.1 CONNECT with credentials: the CONNACK return code (0: accepted), None if no answer."""
    body = _mqtt_string("MQTT") + bytes([4, 0xC2]) + struct.pack("!H", 30)
    body += _mqtt_string("probe-" + secrets.token_hex(4)) + _mqtt_string(username) + _mqtt_string(password)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(bytes([0x10, len(body)]) + body)
            answer = b""
            while len(answer) < 4:
                chunk = s.recv(4 - len(answer))
                if not chunk:
                    return None
                answer += chunk
            s.sendall(bytes([0xE0, 0]))  # DISCONNECT
    except OSError:
        return None
    return answer[3] if answer[0] == 0x20 else None


# Reads one Erlang expression per line from stdin, prints "@@ok <result>" or "@@error <reason>" per line
# (~w: one line; the VM's own reports, "node not responding" say, go to stdout too and are skipped),
# halts at EOF (when the test process closes the pipe, or dies).
_CONTROLLER = (
    "Loop = fun L() -> case io:get_line(\"\") of eof -> halt(0); Line -> "
    "R = try {ok, T, _} = erl_scan:string(Line), {ok, E} = erl_parse:parse_exprs(T), "
    "{value, V, _} = erl_eval:exprs(E, []), {ok, V} catch C:X -> {error, {C, X}} end, "
    "case R of {ok, Val} -> io:format(\"@@ok ~w~n\", [Val]); {error, Why} -> io:format(\"@@error ~w~n\", [Why]) end, "
    "L() end end, Loop()."
)

# Who may publish and subscribe what, by the topic layout of docs/security.md: under any namespace,
# data, unicast, presence, key records and elections.
LAYOUT = ["+/d/#", "+/u/#", "+/p/+", "+/k/+", "+/actor/#"]


class _Node:
    def __init__(self, index: int, name: str, root: Path) -> None:
        self.index = index
        self.name = name
        self.dir = root / f"node{index}"
        self.spool = self.dir / "spool"
        self.log = self.dir / "log"
        for d in (self.spool, self.log):
            d.mkdir(parents=True)
        self.mqtt_port = _free_port()
        self.dist_port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class EjabberdCluster:
    """``nodes`` ejabberd nodes in one cluster; ``users`` registered with password ``pw-<user>``.

    ``url(node, user)`` is the MQTT URL of node ``node`` (1-based) with that user's credentials; ``urls(user)``
    lists every node's. ``acl``: when true (the default) ``mod_mqtt`` lets clients publish and subscribe only
    the project's topic layout (:data:`LAYOUT`), else everything. ``mqtt_options``: more ``mod_mqtt`` options
(YAML values as strings; ``max_queue: unlimited`` and ``max_topic_depth: 32`` unless given).
    ``net_ticktime`` (seconds; ejabberd's option, which overrides the VM's; 60 by default): how soon a node takes a silent (hung) peer node for
    dead. Until then, a client whose session lives on the hung node cannot connect to another node: the
    takeover of its session waits for the hung node."""

    def __init__(self, nodes: int = 2, users: tuple[str, ...] = ("u1", "u2", "u3", "u4"), *,
                 acl: bool = True, mqtt_options: dict[str, str] | None = None, net_ticktime: int = 10,
                 start_timeout: float = 120.0) -> None:
        why = ejabberd_missing()
        if why:
            raise EjabberdError(why)
        self.erl_libs = _erl_libs()
        self.run = secrets.token_hex(4)
        self.users = users
        self.acl = acl
        self.net_ticktime = net_ticktime
        self.mqtt_options = {"max_queue": "unlimited", "max_topic_depth": "32", **(mqtt_options or {})}
        self.start_timeout = start_timeout
        self._tmp = Path(tempfile.mkdtemp(prefix="ejabberd-"))
        self._cookie = secrets.token_hex(16)
        self._epmd_port = _free_port()
        self._epmd: subprocess.Popen[bytes] | None = None
        self._ctl: subprocess.Popen[str] | None = None
        self._ctl_lock = threading.Lock()
        self._request = 0
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._ctl_port = _free_port()
        self.nodes = [_Node(i, f"ej{i}_{self.run}@{HOST}", self._tmp) for i in range(1, nodes + 1)]

    # -- public ------------------------------------------------------------------------------------
    def url(self, node: int = 1, user: str = "u1") -> str:
        return f"mqtt://{user}%40{HOST}:{self.password(user)}@127.0.0.1:{self.nodes[node - 1].mqtt_port}"

    def urls(self, user: str = "u1") -> list[str]:
        return [self.url(n.index, user) for n in self.nodes]

    @staticmethod
    def password(user: str) -> str:
        return f"pw-{user}"

    def port(self, node: int) -> int:
        return self.nodes[node - 1].mqtt_port

    def pid(self, node: int) -> int | None:
        p = self.nodes[node - 1].proc
        return p.pid if p is not None and p.poll() is None else None

    def running_nodes(self, via: int = 1) -> list[str]:
        """The cluster's running nodes as node ``via`` sees them (mnesia's running_db_nodes)."""
        n = self.nodes[via - 1]
        got = self.eval(f"rpc:call('{n.name}', mnesia, system_info, [running_db_nodes], 5000)")
        return sorted(re.findall(r"ej\d+_\w+@\w+", got)) if got.startswith("[") else []

    def kill(self, node: int, *, wait: bool = True) -> None:
        """SIGKILL node ``node``'s VM (and its port programs): a crash, no goodbye to anyone. With ``wait``,
        returns once the other nodes saw it go."""
        n = self.nodes[node - 1]
        if n.proc is not None and n.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(n.proc.pid, signal.SIGKILL)
            n.proc.wait()
            alive = [m for m in self.nodes if m.running]
            if wait and alive and self._ctl is not None:  # until the others saw it go (at once on loopback: the socket closes)
                _wait(lambda: all(n.name not in self.running_nodes(m.index) for m in alive), 60,
                      f"the cluster to see {n.name} gone", step=0.05)

    def stop(self, node: int) -> None:
        """SIGSTOP node ``node``'s VM: a hung broker node, its sockets open, nothing answered (:meth:`cont`)."""
        n = self.nodes[node - 1]
        if n.running:
            os.killpg(n.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]

    def cont(self, node: int) -> None:
        n = self.nodes[node - 1]
        if n.running:
            os.killpg(n.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]

    def healthy(self) -> bool:
        """Every node running and seeing all the others."""
        names = sorted(n.name for n in self.nodes)
        return all(n.running for n in self.nodes) and all(self.running_nodes(n.index) == names for n in self.nodes)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        _wait(self.healthy, timeout, "every node running and in the cluster", step=0.2)

    def restart(self, node: int) -> None:
        """Start a killed node again (same name, ports and spool) and wait until the cluster has all its
        nodes running again and the node accepts MQTT logins."""
        n = self.nodes[node - 1]
        if n.running:
            raise EjabberdError(f"node {node} is running")
        self._start_node(n)
        self._wait_started(n)
        self._wait_cluster()

    def eval(self, expression: str, timeout: float = 60.0) -> str:
        """Evaluate one Erlang expression in the controller VM; its result as written by ``~w``. Each request
        carries a number the answer repeats: a late answer to an earlier request (timed out) is skipped."""
        assert self._ctl is not None and self._ctl.stdin is not None
        with self._ctl_lock:
            self._request += 1
            n = self._request
            body = expression.strip().rstrip(".")
            self._ctl.stdin.write(f"{{{n}, try begin {body} end catch C:X -> {{'$error', C, X}} end}}.\n")
            self._ctl.stdin.flush()
            deadline = time.monotonic() + timeout
            while True:
                try:
                    line = self._answers.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise EjabberdError(f"{expression}: no answer within {timeout:.0f} s") from None
                if line is None:
                    raise EjabberdError(f"{expression}: the controller ended")
                if line.startswith(f"@@ok {{{n},") and line.endswith("}"):
                    value = line[len(f"@@ok {{{n},"):-1]
                    if value.startswith("{'$error',"):
                        raise EjabberdError(f"{expression}: {value}")
                    return value
                if line.startswith("@@error"):
                    raise EjabberdError(f"{expression}: {line}")
                # a late answer, or one of the VM's own reports: skipped

    def register(self, user: str) -> None:
        got = self.eval(f"rpc:call('{self.nodes[0].name}', ejabberd_auth, try_register, "
                        f"[<<\"{user}\">>, <<\"{HOST}\">>, <<\"{self.password(user)}\">>], 30000)")
        if not (got == "ok" or got.startswith("{ok,") or got == "{error,exists}"):
            raise EjabberdError(f"register {user}: {got}")

    def log(self, node: int) -> str:
        """What node ``node`` wrote to its ejabberd log and its stdout (for failure messages)."""
        n = self.nodes[node - 1]
        parts = [p.read_text(errors="replace") for p in (n.log / "ejabberd.log", n.dir / "stdout.log") if p.exists()]
        return "\n".join(parts)

    # -- start and stop ---------------------------------------------------------------------------
    def __enter__(self) -> EjabberdCluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        home = self._tmp / "home"
        home.mkdir()
        cookie = home / ".erlang.cookie"
        cookie.write_text(self._cookie)
        cookie.chmod(0o400)
        (self._tmp / "inetrc").write_text(f'{{lookup,["file","native"]}}.\n{{host,{{127,0,0,1}}, ["{HOST}"]}}.\n')
        self._epmd = subprocess.Popen(["epmd", "-port", str(self._epmd_port), "-address", "127.0.0.1"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      preexec_fn=_die_with_parent)  # noqa: PLW1509 - PDEATHSIG, no threads yet
        _wait(lambda: _accepts(self._epmd_port) or self._epmd.poll() is not None, 10, "epmd")  # type: ignore[union-attr]
        if self._epmd.poll() is not None:
            raise EjabberdError(f"epmd on port {self._epmd_port} exited")
        for n in self.nodes:
            self._start_node(n)
        self._ctl = subprocess.Popen(
            ["erl", "-sname", f"ctl_{self.run}@{HOST}", "-hidden", *self._dist_args(self._ctl_port),
             "-noshell", "-eval", _CONTROLLER],
            env=self._env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            preexec_fn=_die_with_parent)  # noqa: PLW1509
        threading.Thread(target=_read_lines, args=(self._ctl.stdout, self._answers), daemon=True).start()
        for n in self.nodes:
            self._wait_app(n)
        first = self.nodes[0]
        for n in self.nodes[1:]:
            got = self.eval(f"rpc:call('{n.name}', ejabberd_cluster, join, ['{first.name}'], 120000)", 130)
            if got != "ok":
                raise EjabberdError(f"{n.name} did not join {first.name}: {got}")
        self._wait_cluster()
        for user in self.users:
            self.register(user)
        for n in self.nodes:
            self._wait_started(n)

    def close(self) -> None:
        try:
            self._close()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def _close(self) -> None:
        for n in self.nodes:
            self.kill(n.index, wait=False)
        if self._ctl is not None:
            with contextlib.suppress(OSError, ValueError):
                self._ctl.stdin.close()  # type: ignore[union-attr]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._ctl.pid, signal.SIGKILL)
            self._ctl.wait()
            with contextlib.suppress(OSError, ValueError):
                self._ctl.stdout.close()  # type: ignore[union-attr]
            self._ctl = None
        if self._epmd is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._epmd.pid, signal.SIGKILL)
            self._epmd.wait()
            self._epmd = None

    # -- internals --------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ERL_", "EJABBERD_"))}
        env.update(HOME=str(self._tmp / "home"), ERL_EPMD_PORT=str(self._epmd_port), ERL_LIBS=str(self.erl_libs),
                   ERL_INETRC=str(self._tmp / "inetrc"), ERL_MAX_ETS_TABLES="1400", ERL_CRASH_DUMP="/dev/null")
        return env

    def _dist_args(self, port: int) -> list[str]:
        return ["-start_epmd", "false", "-kernel", "inet_dist_listen_min", str(port), "inet_dist_listen_max", str(port),
                "inet_dist_use_interface", "{127,0,0,1}", "net_ticktime", str(self.net_ticktime),
                "+sbwt", "none", "+sbwtdcpu", "none", "+sbwtdio", "none"]

    def _config(self, n: _Node) -> str:
        if self.acl:
            rules = "{" + ", ".join(f'"{t}": all' for t in LAYOUT) + ', "#": none}'
        else:
            rules = '{"#": all}'
        return "\n".join([
            f"hosts: [{HOST}]",
            "loglevel: warning",
            "hide_sensitive_log_data: true",
            "listen:",
            f"  - port: {n.mqtt_port}",
            '    ip: "127.0.0.1"',
            "    module: mod_mqtt",
            "    backlog: 1024",
            f"net_ticktime: {self.net_ticktime}",
            "auth_method: internal",
            "acl:",
            "  local:",
            '    user_regexp: ""',
            "modules:",
            "  mod_mqtt:",
            f"    access_publish: {rules}",
            f"    access_subscribe: {rules}",
            *(f"    {k}: {v}" for k, v in self.mqtt_options.items()),
            "",
        ])

    def _start_node(self, n: _Node) -> None:
        config = n.dir / "ejabberd.yml"
        config.write_text(self._config(n))
        env = self._env()
        env.update(EJABBERD_CONFIG_PATH=str(config), EJABBERD_LOG_PATH=str(n.log / "ejabberd.log"))
        with open(n.dir / "stdout.log", "ab") as out:
            n.proc = subprocess.Popen(
                ["erl", "-sname", n.name, *self._dist_args(n.dist_port), "+K", "true", "+P", "250000",
                 "-env", "ERL_CRASH_DUMP_BYTES", "0", "-mnesia", "dir", f'"{n.spool}"', "-s", "ejabberd", "-noinput"],
                env=env, cwd=n.spool, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent)  # noqa: PLW1509

    def _check_alive(self, n: _Node) -> None:
        if not n.running:
            raise EjabberdError(f"{n.name} exited: {self.log(n.index)[-3000:]}")

    def _wait_app(self, n: _Node) -> None:
        """Until the ejabberd application of ``n`` is started."""
        def started() -> bool:
            self._check_alive(n)
            return self.eval(f"lists:keymember(ejabberd, 1, case rpc:call('{n.name}', application, "
                             "which_applications, [], 5000) of L when is_list(L) -> L; _ -> [] end)") == "true"
        _wait(started, self.start_timeout, f"ejabberd to start on {n.name}", step=0.2)

    def _wait_started(self, n: _Node) -> None:
        """Until ``n`` runs ejabberd and accepts an MQTT login of the first user."""
        self._wait_app(n)
        user = self.users[0] if self.users else None
        if user is None:
            _wait(lambda: _accepts(n.mqtt_port), self.start_timeout, f"{n.name}'s MQTT listener")
            return

        def login() -> bool:
            self._check_alive(n)
            return mqtt_login(n.mqtt_port, f"{user}@{HOST}", self.password(user)) == 0
        _wait(login, self.start_timeout, f"an MQTT login at {n.name}")

    def _wait_cluster(self) -> None:
        names = sorted(n.name for n in self.nodes)
        _wait(lambda: all(self.running_nodes(n.index) == names for n in self.nodes), self.start_timeout,
              f"{len(names)} running nodes in the cluster", step=0.2)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _read_lines(stream: Any, into: queue.Queue[str | None]) -> None:
    """The controller's stdout, line by line, into a queue; None at its end."""
    with contextlib.suppress(OSError, ValueError):
        for line in stream:
            into.put(line.rstrip("\n"))
    into.put(None)
