"""An embedded mosquitto: a real MQTT 5 broker as a child process, for when no URL is given.

:class:`EmbeddedBroker` writes a config into a private temporary directory, picks a free
loopback port, starts ``mosquitto -c``, and waits until the port accepts connections. The
config (see :meth:`EmbeddedBroker.config_text`):

- one listener on 127.0.0.1, anonymous access (reachable from this host only); ``host=`` binds
  another address, e.g. ``"0.0.0.0"`` for every IPv4 interface, which anyone who can reach the host
  may then use: add a ``password_file`` or TLS in ``extra_config``;
- ``set_tcp_nodelay true`` (without it a request/response costs 44-88 ms of Nagle delay);
- ``max_queued_messages 0`` / ``max_queued_bytes 0`` (unlimited): mosquitto's default silently
  drops QoS 0 *and* QoS 1 messages past 1000 queued for a slow subscriber;
- persistence in the temporary directory, so :meth:`restart` keeps sessions, subscriptions,
  queued QoS 1 messages and retained messages, as a production broker would.

No orphan survives: the child gets ``PR_SET_PDEATHSIG`` (SIGTERM when the parent dies, even by
SIGKILL), :meth:`stop` runs at interpreter exit, and stop escalates SIGTERM -> SIGKILL. Two
details make PDEATHSIG hold: the signal fires when the *thread* that forked exits, so the broker
is always spawned from the caller's thread (never a worker thread); and the kernel clears it when
a process changes credentials, so as root the config says ``user root`` (mosquitto would
otherwise drop to the ``mosquitto`` user).
Use it as ``with EmbeddedBroker() as b:`` or ``async with EmbeddedBroker() as b:``.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import anyio

from ..errors import MosquittoNotFound, TransportError
from .broker_url import BrokerURL, parse_broker_urls

__all__ = ["EmbeddedBroker", "acquire_shared_broker", "find_mosquitto", "release_shared_broker", "resolve_broker"]

_PR_SET_PDEATHSIG = 1
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 - a bind address, named on purpose


def find_mosquitto() -> str:
    """Path of the mosquitto binary; raises :class:`MosquittoNotFound` with install advice."""
    found = shutil.which("mosquitto")
    if found:
        return found
    for candidate in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"):
        if os.access(candidate, os.X_OK):
            return candidate
    raise MosquittoNotFound()


# MQTT 3.1.1 CONNECT: clean session, keep-alive 60 s, empty client id; any broker answers CONNACK (0x20).
_PROBE_CONNECT = bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 2, 0, 60, 0, 0])
_PORTS_FROM = 20000  # embedded brokers pick ports from here up to the ephemeral range
_handed_out: set[int] = set()  # ports chosen in this process: never chosen twice
_handed_out_lock = threading.Lock()


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out for outgoing connections (Linux; the IANA range elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535


def _free_port() -> int:
    """A loopback port nothing listens on, outside the kernel's ephemeral range when there is room.

    Outside that range, no outgoing connection of any process can be given the port while the
    broker is down between a stop and a start (:meth:`EmbeddedBroker.restart` keeps its port, as
    clients reconnect to it). Another process may still pick the same port before mosquitto binds
    it: :meth:`EmbeddedBroker.start` then tries another port (only for a port it chose itself).
    """
    low, _high = _ephemeral_range()
    with _handed_out_lock:
        if low > _PORTS_FROM + 1000:
            for _ in range(50):
                port = random.randrange(_PORTS_FROM, low)
                if port in _handed_out:  # a broker of this process may be down for a restart
                    continue
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    try:
                        s.bind(("127.0.0.1", port))
                    except OSError:
                        continue
                _handed_out.add(port)
                return port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    except OSError:
        pass
    os.setpgrp()  # a Ctrl-C in the parent's terminal must not kill the broker before we stop it


class EmbeddedBroker:
    """A mosquitto child process on a free loopback port.

    ``host`` is the address the listener binds: 127.0.0.1 (this host only) unless asked otherwise;
    a wildcard (``"0.0.0.0"``, ``"::"``) binds every interface, and :attr:`url` then names the
    loopback address. ``max_packet_size`` (bytes) is announced to clients in CONNACK; larger
    packets are refused.
    ``password_file`` (made with ``mosquitto_passwd``) turns anonymous access off.
    ``extra_config`` lines are appended verbatim (e.g. a TLS listener, a bridge for split tests).
    ``autosave_interval`` (seconds, default 60) is how often mosquitto saves its state: a crash
    loses what it acknowledged since (subscribers are told: docs/guarantees.md); shorter costs
    more disk writes. A clean stop or restart always saves.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        max_packet_size: int = 16 * 1024 * 1024,
        extra_config: str = "",
        password_file: str | None = None,
        start_timeout: float = 10.0,
        autosave_interval: int = 60,
    ) -> None:
        if not host:
            raise ValueError("host must be an address to bind: 127.0.0.1, 0.0.0.0, ::, ...")
        self.host = host
        self._own_port = not port  # chosen here: another may be tried when it is taken at the start
        self.port = port or _free_port()
        self.max_packet_size = max_packet_size
        self.extra_config = extra_config
        self.password_file = password_file
        self.start_timeout = start_timeout
        if autosave_interval < 1:
            raise ValueError("autosave_interval must be at least 1 second")
        self.autosave_interval = autosave_interval
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_once = False  # the port was bound once: from then on it is kept
        self._log_mark = 0  # where this start's part of mosquitto.log begins

    @property
    def connect_host(self) -> str:
        """The address clients of this host reach the listener at (loopback for a wildcard ``host``)."""
        return _WILDCARDS.get(self.host, self.host)

    @property
    def url(self) -> str:
        host = self.connect_host
        return f"mqtt://[{host}]:{self.port}" if ":" in host else f"mqtt://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def config_text(self) -> str:
        assert self._dir is not None
        return "\n".join(
            [
                f"listener {self.port} {self.host}",
                "allow_anonymous true" if self.password_file is None else "allow_anonymous false",
                f"password_file {self.password_file}" if self.password_file else "",
                "set_tcp_nodelay true",
                "max_queued_messages 0",
                "max_queued_bytes 0",
                "max_inflight_messages 0",
                f"max_packet_size {self.max_packet_size}",
                "persistence true",
                f"persistence_location {self._dir}/",
                f"autosave_interval {self.autosave_interval}",
                "log_dest stderr",
                "log_type error",
                "log_type warning",
                "user root" if os.geteuid() == 0 else "",
                self.extra_config,
                "",
            ]
        )

    # -- synchronous control (fixtures, CLI) -------------------------------------------------
    def start(self) -> None:
        """Start mosquitto and block until it accepts connections (or raise TransportError).

        The broker gets SIGTERM when the thread that called this ends (PDEATHSIG, see the module
        docstring): call it from a thread that outlives the broker; from async code, :meth:`astart`."""
        if self.running:
            return
        for attempt in range(5):
            self._spawn()
            deadline = time.monotonic() + self.start_timeout
            try:
                while not self._ready(deadline):
                    time.sleep(0.005)
                return
            except TransportError:
                if not self._port_taken() or attempt == 4:
                    raise
                self.port = _free_port()  # another process took the port first: take another

    async def astart(self) -> None:
        """:meth:`start` without blocking the event loop (spawned from this thread).

        Safe to call from several tasks: the later ones wait until the broker accepts connections.
        """
        for attempt in range(5):
            if not self.running:
                self._spawn()
            deadline = time.monotonic() + self.start_timeout
            try:  # the probe blocks for up to a second: off the event loop
                while not await anyio.to_thread.run_sync(self._ready, deadline):
                    await anyio.sleep(0.005)
                return
            except TransportError:
                if not self._port_taken() or attempt == 4:
                    raise
                self.port = _free_port()  # another process took the port first: take another

    def _spawn(self) -> None:
        exe = find_mosquitto()
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="broker-mqtt-"))
        conf = self._dir / "mosquitto.conf"
        conf.write_text(self.config_text())
        log = open(self._dir / "mosquitto.log", "ab")  # noqa: SIM115 - owned by the child
        self._log_mark = log.tell()
        try:
            self._proc = subprocess.Popen(
                [exe, "-c", str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - needed for PDEATHSIG
            )
        finally:
            log.close()
        atexit.register(self.stop)

    def _answers_mqtt(self) -> bool:
        """Whether an MQTT broker answers on the port (a CONNACK to a bare CONNECT), not just any
        process that happens to listen there."""
        try:
            with socket.create_connection((self.connect_host, self.port), 0.5) as s:
                s.settimeout(0.5)
                s.sendall(_PROBE_CONNECT)
                return s.recv(1) == b"\x20"
        except OSError:
            return False

    def _port_taken(self) -> bool:
        """Whether mosquitto just failed because its port was taken, on a port chosen here, never
        bound before (a restart keeps its port: clients reconnect to it)."""
        if not self._own_port or self._started_once or self._dir is None:
            return False
        with open(self._dir / "mosquitto.log", "rb") as log:
            log.seek(self._log_mark)
            return b"Address already in use" in log.read()

    def _ready(self, deadline: float) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            code = self._proc.returncode
            self._proc = None
            raise TransportError(f"mosquitto exited with code {code} at start: {self.log_tail()}")
        if self._answers_mqtt():
            self._started_once = True
            return True
        if time.monotonic() > deadline:
            self.stop()
            raise TransportError(f"mosquitto did not accept connections within {self.start_timeout}s")
        return False

    def stop(self, *, timeout: float = 5.0) -> None:
        """Stop mosquitto (SIGTERM, then SIGKILL); it saves its persistence file first."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def kill(self) -> None:
        """SIGKILL the broker (no persistence save), as a crash would."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            atexit.unregister(self.stop)
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        """Stop and start again on the same port with the same persistence directory.

        Call it (like :meth:`start`) from a thread that lives as long as the broker: the broker
        gets SIGTERM when the thread that spawned it ends. Not from a worker thread
        (``anyio.to_thread``, a thread pool), whose idle threads end after a few seconds: from
        async code use :meth:`arestart`."""
        self.stop()
        self.start()

    async def arestart(self) -> None:
        """:meth:`restart` without blocking the event loop: stops in a worker thread, then starts
        from this thread (:meth:`astart`), so the new broker lives as long as the caller's."""
        await anyio.to_thread.run_sync(self.stop)
        await self.astart()

    def cleanup(self) -> None:
        self.stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def log_tail(self, limit: int = 2000) -> str:
        if self._dir is None or not (self._dir / "mosquitto.log").exists():
            return ""
        return (self._dir / "mosquitto.log").read_text(errors="replace")[-limit:]

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    async def __aenter__(self) -> EmbeddedBroker:
        await self.astart()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


# -- the broker shared by every Endpoint(broker=None) of this process -------------------------
_shared_lock = threading.Lock()
_shared: EmbeddedBroker | None = None
_shared_users = 0


async def acquire_shared_broker() -> EmbeddedBroker:
    """Start (from this thread: see embedded.py on PDEATHSIG) or reuse the process's broker."""
    global _shared, _shared_users
    with _shared_lock:
        if _shared is None:
            _shared = EmbeddedBroker()
        _shared_users += 1
        broker = _shared
    await broker.astart()
    return broker


def release_shared_broker() -> None:
    """Drop one user of the process's broker; the last one stops it."""
    global _shared, _shared_users
    with _shared_lock:
        _shared_users -= 1
        if _shared_users == 0 and _shared is not None:
            _shared.cleanup()
            _shared = None


async def resolve_broker(broker: str | Sequence[str] | EmbeddedBroker | None) -> tuple[list[BrokerURL], bool]:
    """The URLs an endpoint given ``broker`` connects to (several: a list, or URLs separated by
    commas, tried in turn), and whether that is the process's shared embedded broker (then
    acquired: call :func:`release_shared_broker` when done). ``None`` means ``$BROKER_MQTT_URL`` if
    set, else the shared broker; an :class:`EmbeddedBroker` not running is started. Raises
    :class:`UsageError` for a bad URL."""
    if broker is None:
        broker = os.environ.get("BROKER_MQTT_URL") or None
    if broker is None:
        shared = await acquire_shared_broker()
        return [BrokerURL.parse(shared.url)], True
    if isinstance(broker, EmbeddedBroker):
        if not broker.running:
            await broker.astart()
        return [BrokerURL.parse(broker.url)], False
    return parse_broker_urls(broker), False
