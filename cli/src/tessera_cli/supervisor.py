"""The processes behind ``tessera up`` / ``down`` / ``status``: start, check, record and stop services.

:data:`SERVICES` is the one table of services that run as their own OS process; a new service
joins ``tessera up`` by adding a row. Each runs as ``python -m <module> <args>`` in its own session
(a Ctrl-C in the terminal does not reach it), with ``NATS_URL``, ``DATABASE_URL`` and
``TESSERA_HOME`` in its environment. A row with ``http_health`` listens on ``up``'s ``--port``
(the gateway) and is healthy when that path answers 200; any other is healthy when its process
is alive and answers the NATS request ``rpc.<name>.health``.

Layout under the home folder (the embedded stack's, ``$TESSERA_HOME`` or ``./.tessera``)::

    <home>/run/<service>.pid   pid of each service started by ``up``; removed when it is stopped
    <home>/run/up.json         what ``up`` started: URLs, gateway URL, services, whether it started the stack
    <home>/logs/<service>.log  the service's stdout and stderr, appended to

Stopping: SIGTERM to the service's process group, then SIGKILL after ``grace_s`` (20 s). A pid
that now runs another program is left alone. Times are in seconds. POSIX only.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nats.aio.client import Client as NATS

from tessera_runtime import devstack
from tessera_runtime.devstack.process import port_is_free

if TYPE_CHECKING:
    import httpx

HOST = "127.0.0.1"
DEFAULT_PORT = 8080
HEALTH_TIMEOUT_S = 30.0
STOP_GRACE_S = 20.0
_POLL_S = 0.1


@dataclass(frozen=True)
class Service:
    """One service run as its own process.

    Attributes:
        name: its name: the log and pid file names, and the RPC service asked ``health``.
        module: run as ``python -m <module>``.
        args: its arguments; ``{host}`` and ``{port}`` are replaced by ``up``'s address.
        http_health: for an HTTP service (it listens on ``up``'s ``--port``): the path that answers
            200 when it is healthy. None: healthy when it answers ``rpc.<name>.health`` on NATS.
    """

    name: str
    module: str
    args: tuple[str, ...] = ()
    http_health: str | None = None

    def argv(self, host: str, port: int) -> list[str]:
        """The command line that starts it."""
        return [sys.executable, "-m", self.module, *(a.format(host=host, port=port) for a in self.args)]


SERVICES: list[Service] = [
    Service("tenancy", "tessera_tenancy"),
    Service("scheduler", "tessera_scheduler"),
    Service("scheduler_standby", "tessera_scheduler", ("--instance", "scheduler_standby")),
    Service("gateway", "tessera_gateway", ("--host", "{host}", "--port", "{port}"), http_health="/healthz"),
]
"""Every service ``tessera up`` starts, in start order (stopped in reverse)."""


class SupervisorError(RuntimeError):
    """A service could not be started, became unhealthy, or ``up`` found the system already running."""


# -- files ----------------------------------------------------------------------------------------


def run_dir(home: Path) -> Path:
    """``<home>/run``: pid files and ``up.json``."""
    return home / "run"


def log_path(home: Path, name: str) -> Path:
    """``<home>/logs/<name>.log``."""
    return home / "logs" / f"{name}.log"


def pid_path(home: Path, name: str) -> Path:
    """``<home>/run/<name>.pid``."""
    return run_dir(home) / f"{name}.pid"


def read_state(home: Path) -> dict[str, Any] | None:
    """``<home>/run/up.json``, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads((run_dir(home) / "up.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_state(home: Path, state: dict[str, Any]) -> None:
    target = run_dir(home) / "up.json"
    tmp = target.with_name(".up.json.tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(target)


def recorded_pids(home: Path) -> dict[str, int]:
    """The pid of every ``<home>/run/<name>.pid`` (files that do not hold a number are skipped)."""
    pids: dict[str, int] = {}
    for file in sorted(run_dir(home).glob("*.pid")):
        with contextlib.suppress(OSError, ValueError):
            pids[file.stem] = int(file.read_text().strip())
    return pids


# -- processes ------------------------------------------------------------------------------------

# Processes started by this process: polled for their exit status and reaped by it.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@atexit.register
def _forget_children() -> None:
    """Let detached services outlive us without Popen's "still running" ResourceWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        _CHILDREN.clear()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (reaping it if it is our exited child)."""
    proc = _CHILDREN.get(pid)
    if proc is not None:
        return proc.poll() is None
    with contextlib.suppress(ChildProcessError, OSError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def pid_runs(pid: int, module: str | None) -> bool:
    """Whether ``pid`` is alive and (where /proc tells) its command line runs ``module``."""
    if pid <= 0 or not pid_alive(pid):
        return False
    if module is None:
        return True
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True
    return module.encode() in argv


def exit_status(pid: int) -> int | None:
    """The exit status of a child this process started, once it has exited (else None)."""
    proc = _CHILDREN.get(pid)
    return proc.poll() if proc is not None else None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``pid`` leads (its own session), else to ``pid`` alone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
            return
    except (ProcessLookupError, PermissionError):
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop_pid(pid: int, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group of ``pid``; SIGKILL it if still there after ``grace_s`` seconds."""
    _signal_group(pid, signal.SIGTERM)
    if not _wait_gone(pid, grace_s):
        _signal_group(pid, signal.SIGKILL)
        _wait_gone(pid, 5.0)
    _CHILDREN.pop(pid, None)


def last_log_line(path: Path, limit: int = 200) -> str:
    """The last non-blank line of a log (at most ``limit`` characters), or ``""``."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 8192))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip() and not line.startswith("--- tessera up:")]
    return lines[-1][:limit] if lines else ""


# -- up -------------------------------------------------------------------------------------------


@dataclass
class Started:
    """What :func:`start` started: the URLs, the services' pids, whether it started the stack."""

    home: Path
    nats_url: str
    database_url: str
    gateway_url: str | None
    stack_started: bool
    services: list[Service]
    pids: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    """Services that were already running (not started by this ``up``), by name: their pids."""

    @property
    def new(self) -> dict[str, int]:
        """The services this ``up`` started: name -> pid."""
        return {name: pid for name, pid in self.pids.items() if name not in self.kept}


def _running(home: Path) -> dict[str, int]:
    """Recorded services whose process is alive; stale pid files are removed."""
    state = read_state(home) or {}
    modules = {name: info.get("module") for name, info in (state.get("services") or {}).items()}
    alive = {}
    for name, pid in recorded_pids(home).items():
        if pid_runs(pid, modules.get(name)):
            alive[name] = pid
        else:
            pid_path(home, name).unlink(missing_ok=True)
    return alive


def _servers(home: Path) -> tuple[str, str, bool]:
    """NATS and Postgres URLs: from the environment when both are set, else the embedded stack.

    Returns ``(nats_url, database_url, stack_started)``; ``stack_started`` is True when this call
    (or an earlier ``up`` of this home that crashed) started the stack, so ``down`` stops it.
    """
    env_nats, env_db = os.environ.get("NATS_URL"), os.environ.get("DATABASE_URL")
    if env_nats and env_db:
        return env_nats, env_db, False
    before = devstack.status(home)
    previous = read_state(home) or {}
    info = devstack.up(home)
    started = before is None or bool(previous.get("stack_started"))
    return env_nats or info.nats_url, env_db or info.database_url, started


def start(
    home: Path,
    *,
    port: int = DEFAULT_PORT,
    host: str = HOST,
    services: Sequence[Service] | None = None,
) -> Started:
    """Start the stack (unless ``NATS_URL`` and ``DATABASE_URL`` are set) and every service that is not running.

    When some services of this home are running (e.g. one was killed), those are kept as they are
    and only the others are started, with the URLs ``up`` recorded; ``port`` matters only when the
    HTTP service is among them. Returns once the processes are started, not once they are healthy
    (see :func:`wait_healthy`). On failure, what this call started is stopped again
    (:func:`abandon`).

    Raises:
        SupervisorError: every service of this home is already running, or the port is taken.
        devstack.StackError: the embedded stack could not start.
    """
    home = Path(home).resolve()
    services = list(SERVICES if services is None else services)
    running = _running(home)
    missing = [s for s in services if s.name not in running]
    if running and not missing:
        which = ", ".join(f"{name} pid {pid}" for name, pid in running.items())
        raise SupervisorError(
            f"tessera is already running in {home} ({which}): see `tessera status`; stop it with `tessera down`"
        )
    if any(s.http_health for s in missing) and not port_is_free(port, host):
        raise SupervisorError(f"port {port} on {host} is taken: stop what uses it or choose another with --port")
    run_dir(home).mkdir(parents=True, exist_ok=True)
    (home / "logs").mkdir(parents=True, exist_ok=True)
    previous = (read_state(home) or {}) if running else {}
    nats_url, database_url, stack_started = _servers(home)
    http = next((s for s in services if s.http_health), None)
    if http is None:
        gateway_url = None
    elif http.name in running and previous.get("gateway_url"):
        gateway_url = str(previous["gateway_url"])
    else:
        gateway_url = f"http://{host}:{port}"
    started = Started(
        home=home,
        nats_url=nats_url,
        database_url=database_url,
        gateway_url=gateway_url,
        stack_started=stack_started,
        services=services,
        pids={s.name: running[s.name] for s in services if s.name in running},
        kept=dict(running),
    )
    recorded: dict[str, Any] = {
        name: info for name, info in (previous.get("services") or {}).items() if name in running
    }
    state: dict[str, Any] = {
        "nats_url": nats_url,
        "database_url": database_url,
        "gateway_url": started.gateway_url,
        "stack_started": stack_started,
        "started_at": previous.get("started_at") or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "services": recorded,
    }
    _write_state(home, state)
    env = {
        **os.environ,
        "NATS_URL": nats_url,
        "DATABASE_URL": database_url,
        "TESSERA_HOME": str(home),
        "PYTHONUNBUFFERED": "1",
    }
    rank = {s.name: i for i, s in enumerate(services)}
    try:
        for service in missing:
            argv = service.argv(host, port)
            started.pids[service.name] = _spawn(home, service, argv, env)
            recorded[service.name] = {
                "module": service.module,
                "pid": started.pids[service.name],
                "log": str(log_path(home, service.name)),
                "http_health": service.http_health,
            }
            state["services"] = {  # in table order, which `down` reverses
                name: recorded[name] for name in sorted(recorded, key=lambda n: rank.get(n, len(rank)))
            }
            _write_state(home, state)
    except BaseException:
        abandon(started)
        raise
    return started


def abandon(started: Started, grace_s: float = STOP_GRACE_S) -> None:
    """Undo a failed :func:`start`: stop what it started; the services it kept stay as they are.

    With nothing kept this is :func:`down` (the embedded stack too, when ``up`` started it).
    """
    if not started.kept:
        down(started.home, grace_s)
        return
    for name, pid in reversed(list(started.new.items())):
        if pid_alive(pid):
            stop_pid(pid, grace_s)
        pid_path(started.home, name).unlink(missing_ok=True)


def _spawn(home: Path, service: Service, argv: list[str], env: dict[str, str]) -> int:
    log = log_path(home, service.name)
    with log.open("ab") as handle:
        handle.write(f"\n--- tessera up: starting {service.name} at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}: ".encode())
        handle.write(" ".join(argv).encode() + b"\n")
        handle.flush()
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    _CHILDREN[proc.pid] = proc
    pid_path(home, service.name).write_text(f"{proc.pid}\n")
    return proc.pid


# -- health ---------------------------------------------------------------------------------------


async def _connect(nats_url: str) -> NATS | None:
    """A NATS connection for health checks, or None when NATS does not answer."""

    async def quiet(*_: Any) -> None:
        return None

    nc = NATS()
    try:
        await nc.connect(
            nats_url,
            name="tessera-up",
            connect_timeout=1,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            error_cb=quiet,
            disconnected_cb=quiet,
            closed_cb=quiet,
        )
    except Exception:
        return None
    return nc


async def _nats_healthy(nc: NATS | None, name: str) -> bool:
    if nc is None or not nc.is_connected:
        return False
    from tessera_runtime import rpc  # imported when used: keeps `tessera` start-up fast

    try:
        body = json.loads(bytes(await rpc.call(nc, name, "health", timeout_s=1)))
    except Exception:
        return False
    return not isinstance(body, dict) or body.get("status", "ok") == "ok"


def _http_client() -> httpx.AsyncClient:
    import httpx  # imported when used: keeps `tessera` start-up fast

    return httpx.AsyncClient()


async def _http_healthy(client: httpx.AsyncClient, url: str) -> bool:
    import httpx

    try:
        response = await client.get(url, timeout=1.0)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


@dataclass(frozen=True)
class ServiceStatus:
    """One service's state: ``healthy``, ``unhealthy`` (alive, not answering) or ``stopped``."""

    name: str
    pid: int | None
    status: str
    log: str
    url: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """As JSON."""
        return {"name": self.name, "pid": self.pid, "status": self.status, "log": self.log, "url": self.url}


def _plan(home: Path, services: Sequence[Service] | None) -> tuple[list[Service], dict[str, int], dict[str, Any]]:
    """The services to report on (those recorded by ``up``, else the table), the live ones' pids, the state."""
    state = read_state(home) or {}
    recorded: dict[str, Any] = state.get("services") or {}
    if recorded:
        rows = [
            Service(name, info.get("module", ""), http_health=info.get("http_health"))
            for name, info in recorded.items()
        ]
    else:
        rows = list(SERVICES if services is None else services)
    pids = recorded_pids(home)
    alive = {s.name: pids[s.name] for s in rows if s.name in pids and pid_runs(pids[s.name], s.module or None)}
    return rows, alive, state


async def check(home: Path, services: Sequence[Service] | None = None) -> list[ServiceStatus]:
    """The state of each service: those ``up`` recorded in ``home`` (absolute), else the :data:`SERVICES` table."""
    rows, alive, state = _plan(home, services)
    gateway_url = state.get("gateway_url")
    nc = await _connect(str(state["nats_url"])) if alive and state.get("nats_url") else None
    try:
        async with _http_client() as client:
            results = []
            for s in rows:
                url = gateway_url if s.http_health else None
                pid = alive.get(s.name)
                if pid is None:
                    status = "stopped"
                elif s.http_health:
                    ok = bool(url) and await _http_healthy(client, f"{url}{s.http_health}")
                    status = "healthy" if ok else "unhealthy"
                else:
                    status = "healthy" if await _nats_healthy(nc, s.name) else "unhealthy"
                results.append(ServiceStatus(s.name, pid, status, str(log_path(home, s.name)), url))
    finally:
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()
    return results


async def wait_healthy(
    started: Started,
    timeout_s: float = HEALTH_TIMEOUT_S,
    *,
    interrupted: Callable[[], bool] = lambda: False,
) -> None:
    """Wait until every started service is healthy.

    Raises:
        SupervisorError: a service exited, or was not healthy within ``timeout_s`` seconds (the
            message names it and its log).
        KeyboardInterrupt: ``interrupted()`` became true while waiting.
    """
    deadline = time.monotonic() + timeout_s
    pending = {s.name: s for s in started.services}
    nc: NATS | None = None
    try:
        async with _http_client() as client:
            while True:
                if interrupted():
                    raise KeyboardInterrupt
                for name, service in list(pending.items()):
                    pid = started.pids[name]
                    if not pid_alive(pid):
                        raise SupervisorError(_exited_message(started.home, name, exit_status(pid)))
                    if service.http_health:
                        ok = await _http_healthy(client, f"{started.gateway_url}{service.http_health}")
                    else:
                        if nc is None or not nc.is_connected:
                            nc = await _connect(started.nats_url)
                        ok = await _nats_healthy(nc, name)
                    if ok:
                        del pending[name]
                if not pending:
                    return
                if time.monotonic() >= deadline:
                    name = next(iter(pending))
                    log = log_path(started.home, name)
                    raise SupervisorError(f"{name} did not become healthy in {timeout_s:g}s; see {log}")
                await asyncio.sleep(0.2)
    finally:
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()


def _exited_message(home: Path, name: str, status: int | None) -> str:
    log = log_path(home, name)
    how = f" with status {status}" if status is not None else ""
    last = last_log_line(log)
    return f"{name} exited during start-up{how}" + (f" ({last})" if last else "") + f"; see {log}"


def exited(started: Started) -> list[str]:
    """Names of started services whose process is gone."""
    return [name for name, pid in started.pids.items() if not pid_alive(pid)]


# -- down -----------------------------------------------------------------------------------------


@dataclass
class Stopped:
    """What :func:`down` stopped."""

    services: list[tuple[str, int]] = field(default_factory=list)
    stack: bool = False


def down(home: Path, grace_s: float = STOP_GRACE_S) -> Stopped:
    """Stop every service recorded in ``<home>/run/*.pid`` (reverse start order), then the stack if ``up`` started it.

    Idempotent: with nothing running it only removes stale files.
    """
    home = Path(home).resolve()
    state = read_state(home) or {}
    recorded: dict[str, Any] = state.get("services") or {}
    pids = recorded_pids(home)
    order = [name for name in reversed(list(recorded)) if name in pids]
    order += sorted(name for name in pids if name not in order)
    stopped = Stopped()
    for name in order:
        pid = pids[name]
        if pid_runs(pid, (recorded.get(name) or {}).get("module")):
            stop_pid(pid, grace_s)
            stopped.services.append((name, pid))
        pid_path(home, name).unlink(missing_ok=True)
    if state.get("stack_started"):
        stopped.stack = devstack.down(home)
    (run_dir(home) / "up.json").unlink(missing_ok=True)
    return stopped
