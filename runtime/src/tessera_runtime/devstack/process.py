"""Process helpers for the embedded servers: ports, logs, pid checks, and stopping children.

Generic over the program run: nothing here knows NATS or Postgres. Times are in seconds. Pid
checks read ``/proc`` where there is one and otherwise trust the pid.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

__all__ = [
    "LOOPBACK",
    "POLL_S",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "ExitedEarly",
    "StackError",
    "child_env",
    "free_port",
    "kill_popen",
    "kill_tree",
    "log_tail",
    "open_log",
    "pid_alive",
    "pid_is",
    "port_is_free",
    "stop_pid",
    "stop_popen",
    "wait_gone",
]

_log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
"""Seconds a server may take to answer after its process is started."""
STOP_TIMEOUT_S = 10.0
"""Seconds a server may take to exit after the polite signal before it gets SIGKILL."""

LOOPBACK = "127.0.0.1"
"""The only address the embedded servers listen on."""
POLL_S = 0.05
"""Seconds between two checks while waiting for a process to answer or to exit."""


class StackError(RuntimeError):
    """An embedded server could not be started, reached or stopped.

    The message says what failed and, where there is one, ends with the tail of the server's log.
    """


class ExitedEarly(StackError):
    """The server process exited during start-up (most often: its port was taken)."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (the OS's choice).

    Another process may take it before the caller binds it; callers that auto-pick ports retry.

    Raises:
        OSError: the OS could not bind an ephemeral port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether a server (which sets SO_REUSEADDR, as NATS, Postgres and uvicorn do) could bind ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def log_tail(path: Path, limit: int = 4000) -> str:
    """Return the last ``limit`` characters of a log file, or a note that there is none."""
    try:
        data = path.read_bytes()
    except OSError:
        return f"(no log at {path})"
    text = data[-limit:].decode("utf-8", errors="replace")
    return f"--- last lines of {path} ---\n{text}"


def child_env() -> dict[str, str]:
    """Return the environment for servers and client tools: ours minus libpq's PG* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def open_log(path: Path, what: str) -> IO[bytes]:
    """Open a server log for appending, with a header line for this start."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("ab")
    handle.write(f"\n--- tessera: starting {what} at {time.strftime('%Y-%m-%dT%H:%M:%S%z')} ---\n".encode())
    handle.flush()
    return handle


def pid_alive(pid: int) -> bool:
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


def pid_is(pid: int, name: str) -> bool:
    """Whether ``pid`` is alive and (where /proc says) runs the program ``name``."""
    if pid <= 0 or not pid_alive(pid):
        return False
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return True  # no /proc: trust the pid
    return comm == name[:15]


def wait_gone(pid: int, timeout: float) -> bool:
    """Poll until ``pid`` is gone; True if it went within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
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


def kill_tree(pid: int) -> None:
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


def stop_popen(proc: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> None:
    """Send ``sig``, wait ``timeout`` seconds, then SIGKILL the whole group and reap."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            _log.warning("pid %d ignored %s for %.0f s; killing it", proc.pid, sig.name, timeout)
    kill_tree(proc.pid)
    proc.wait()


def kill_popen(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and its children at once (a crash, as the OOM killer would) and reap."""
    kill_tree(proc.pid)
    proc.wait()


def stop_pid(pid: int, name: str, sig: signal.Signals, timeout: float) -> bool:
    """Stop a process known only by pid: ``sig``, wait ``timeout`` seconds, then SIGKILL its group.

    Returns False, touching nothing, if ``pid`` is gone or now runs another program than ``name``.
    """
    if not pid_is(pid, name):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    if not wait_gone(pid, timeout):
        _log.warning("pid %d (%s) ignored %s for %.0f s; killing it", pid, name, sig.name, timeout)
        kill_tree(pid)
        wait_gone(pid, timeout)
    return True
