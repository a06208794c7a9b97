"""``tessera up`` / ``down`` / ``status``: run the whole system on this machine.

``up`` starts the embedded stack (unless ``NATS_URL`` and ``DATABASE_URL`` are set) and every
service of :data:`tessera_cli.supervisor.SERVICES` that is not running: after a service died,
``up`` starts it again and keeps the others as they are (with all of them running it is an error).
In the foreground it prints the gateway URL and each service's pid and runs until Ctrl-C or
SIGTERM, then stops the services and the stack if it started it. With ``--detach`` it prints the
gateway URL once all are healthy and returns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

from tessera_cli import output, supervisor


def _home(args: argparse.Namespace) -> Path:
    return Path(args.home or os.environ.get("TESSERA_HOME", ".tessera")).resolve()


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)")
    return port


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return value


def register(sub: Any) -> None:
    """Add ``up``, ``down`` and ``status``."""
    home_help = "data, logs and pid files (default: $TESSERA_HOME or ./.tessera)"
    up = sub.add_parser("up", help="start the stack and every service; print the gateway URL")
    up.add_argument("-d", "--detach", action="store_true", help="return once all services are healthy")
    up.add_argument("--port", type=_port, default=supervisor.DEFAULT_PORT, help="the gateway's port (default: 8080)")
    up.add_argument(
        "--timeout",
        type=_seconds,
        default=supervisor.HEALTH_TIMEOUT_S,
        metavar="S",
        help="seconds every service has to become healthy (default: 30)",
    )
    up.add_argument("--home", help=home_help)
    up.set_defaults(handler=run_up)

    down = sub.add_parser("down", help="stop the services `tessera up` started, and its stack")
    down.add_argument("--home", help=home_help)
    down.set_defaults(handler=run_down)

    status = sub.add_parser("status", help="each service's pid and health; exit 0 only when all are healthy")
    status.add_argument("--json", action="store_true", help="print an object")
    status.add_argument("--home", help=home_help)
    status.set_defaults(handler=run_status)


async def run_up(args: argparse.Namespace) -> int:
    """Start everything; then return (``--detach``) or supervise until a signal."""
    home = _home(args)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        started = supervisor.start(home, port=args.port)
        try:
            await supervisor.wait_healthy(started, args.timeout, interrupted=stop.is_set)
        except BaseException:
            supervisor.abandon(started)
            raise
        if args.detach:
            if started.gateway_url:
                print(started.gateway_url)
            pids = ", ".join(f"{name} pid {pid}" for name, pid in started.pids.items())
            print(f"tessera is up ({pids}); stop it with `tessera down`", file=sys.stderr)
            if started.kept:
                print(f"started {', '.join(started.new)}; the others were running already", file=sys.stderr)
            return 0
        _print_started(started)
        failure = await _supervise(started, stop)
        stopped = supervisor.down(home)
        if failure:
            print(f"tessera: error: {failure}", file=sys.stderr)
            return 1
        what = [name for name, _ in stopped.services] + (["the embedded stack"] if stopped.stack else [])
        listed = ", ".join(what[:-1]) + (" and " if len(what) > 1 else "") + (what[-1] if what else "")
        print(f"stopped {listed or 'nothing (already stopped)'}", flush=True)
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _print_started(started: supervisor.Started) -> None:
    if started.gateway_url:
        print(f"gateway  {started.gateway_url}")
    rows = [[name, str(pid), str(supervisor.log_path(started.home, name))] for name, pid in started.pids.items()]
    print(output.format_table(["SERVICE", "PID", "LOG"], rows))
    where = "embedded stack" if started.stack_started else "servers"
    print(f"NATS {started.nats_url}, Postgres {started.database_url} ({where})")
    print("Ctrl-C stops everything.", flush=True)


async def _supervise(started: supervisor.Started, stop: asyncio.Event) -> str | None:
    """Wait for a signal, or for a service to exit; returns an error line, or None for a normal stop."""
    while not stop.is_set():
        for name in supervisor.exited(started):
            if not supervisor.pid_path(started.home, name).exists():
                return None  # `tessera down` stopped it
            pid = started.pids[name]
            status = supervisor.exit_status(pid)
            log = supervisor.log_path(started.home, name)
            return f"{name} (pid {pid}) exited with status {status}; see {log}"
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    return None


def run_down(args: argparse.Namespace) -> int:
    """Stop what ``up`` started in the home folder; idempotent."""
    stopped = supervisor.down(_home(args))
    for name, pid in stopped.services:
        print(f"stopped {name} (pid {pid})")
    if stopped.stack:
        print("stopped the embedded stack")
    if not stopped.services and not stopped.stack:
        print("nothing was running")
    return 0


async def run_status(args: argparse.Namespace) -> int:
    """One line per service (name, pid, health, URL); exit 0 only when all are healthy."""
    home = _home(args)
    results = await supervisor.check(home)  # home is absolute
    state = supervisor.read_state(home) or {}
    healthy = bool(results) and all(r.status == "healthy" for r in results)
    if args.json:
        output.print_json(
            {
                "healthy": healthy,
                "gateway_url": state.get("gateway_url"),
                "nats_url": state.get("nats_url"),
                "home": str(home),
                "services": [r.as_dict() for r in results],
            }
        )
    else:
        rows = [[r.name, f"pid {r.pid}" if r.pid else "pid -", r.status, r.url or ""] for r in results]
        print(output.format_table(None, rows))
    return 0 if healthy else 1
