"""Detached mode (``tessera dev up`` / ``down`` / ``status``): a stack that outlives its starter.

:func:`up` starts both servers, leaves them running after the calling process exits and records
them in ``<home>/stack.json`` (and their ports in ``<home>/ports.json``, to reuse next time);
:func:`status`, :func:`down` and :func:`resolve_urls` read that file. Concurrent :func:`up` and
:func:`down` calls on one home are serialised by a lock file.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tessera_runtime.devstack.nats import EmbeddedNats, nats_answers
from tessera_runtime.devstack.postgres import EmbeddedPostgres, pg_bin_dir, pg_isready
from tessera_runtime.devstack.process import STOP_TIMEOUT_S, StackError, pid_is, port_is_free, stop_pid, stop_popen
from tessera_runtime.devstack.server import ChildServer
from tessera_runtime.devstack.stack import EmbeddedStack, StackInfo

__all__ = ["down", "resolve_urls", "status", "up"]

_STACK_FILE = "stack.json"
_PORTS_FILE = "ports.json"
_LOCK_FILE = ".stack.lock"

# Detached servers started by up() in this process: kept so that Popen objects are not
# garbage-collected while running (ResourceWarning) and so down() can reap its own children.
_DETACHED: dict[int, subprocess.Popen[bytes]] = {}


@atexit.register
def _forget_detached() -> None:
    """Let detached servers outlive us without Popen's "still running" ResourceWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        _DETACHED.clear()


def _stop_detached(pid: int, server: type[ChildServer]) -> bool:
    """Stop a ``server`` known only by pid (from stack.json): its stop signal, wait, then SIGKILL.

    Waits :data:`STOP_TIMEOUT_S` seconds before SIGKILL. Returns False, touching nothing, if
    ``pid`` is gone or now runs another program than the server's.
    """
    proc = _DETACHED.pop(pid, None)
    if proc is not None:
        stop_popen(proc, server.STOP_SIGNAL, STOP_TIMEOUT_S)
        return True
    return stop_pid(pid, server.PROGRAM, server.STOP_SIGNAL, STOP_TIMEOUT_S)


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
    """Return the JSON object in ``path``; None if it is missing, unreadable or not an object."""
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
    """Return the stack a stack.json record describes; None if a field is missing or malformed."""
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
        pid_is(nats_pid, EmbeddedNats.PROGRAM)
        and pid_is(pg_pid, EmbeddedPostgres.PROGRAM)
        and nats_answers(nats_port)
        and pg_isready(pg_bin_dir(), pg_port)
    )


def _preferred_port(candidate: Any) -> int | None:
    """``candidate`` if it is a port number free on loopback now, else None (pick a new one)."""
    if isinstance(candidate, int) and 0 < candidate < 65536 and port_is_free(candidate):
        return candidate
    return None


def _stop_record(record: dict[str, Any]) -> bool:
    """Stop the servers a stack.json record names (Postgres first); True if any was running."""
    stopped = False
    with contextlib.suppress(KeyError, TypeError, ValueError):
        stopped |= _stop_detached(int(record["postgres_pid"]), EmbeddedPostgres)
    with contextlib.suppress(KeyError, TypeError, ValueError):
        stopped |= _stop_detached(int(record["nats_pid"]), EmbeddedNats)
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
