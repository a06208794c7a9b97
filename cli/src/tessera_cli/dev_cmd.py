"""``tessera dev``: the embedded NATS + Postgres stack for development, tests and the demo."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from tessera_runtime import devstack


def _home(args: argparse.Namespace) -> Path:
    return Path(args.home or os.environ.get("TESSERA_HOME", ".tessera")).resolve()


def register(sub: Any) -> None:
    """Add the ``dev`` command."""
    p = sub.add_parser("dev", help="the embedded NATS + Postgres stack")
    dsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = dsub.add_parser("up", help="start NATS (JetStream) and Postgres on free loopback ports")
    up.add_argument("--sync-interval", help="JetStream fsync interval, e.g. 'always' or '2m' (default: server's)")
    down = dsub.add_parser("down", help="stop the stack (data is kept)")
    status = dsub.add_parser("status", help="show the running stack")
    env = dsub.add_parser("env", help="print export lines for NATS_URL and DATABASE_URL")
    for q, handler in ((up, run_up), (down, run_down), (status, run_status), (env, run_env)):
        q.add_argument("--home", help="data folder (default: $TESSERA_HOME or ./.tessera)")
        q.set_defaults(handler=handler)


def run_up(args: argparse.Namespace) -> int:
    """Start the stack (or find it running) and print where it listens."""
    started = time.monotonic()
    info = devstack.up(_home(args), sync_interval=args.sync_interval)
    print(f"NATS      {info.nats_url}  (pid {info.nats_pid})")
    print(f"Postgres  {info.database_url}  (pid {info.postgres_pid})")
    print(f"ready in {time.monotonic() - started:.1f}s; data in {info.home}")
    print("stop with: tessera dev down")
    return 0


def run_down(args: argparse.Namespace) -> int:
    """Stop the stack."""
    print("stopped" if devstack.down(_home(args)) else "no stack was running")
    return 0


def run_status(args: argparse.Namespace) -> int:
    """Exit 0 and print the URLs when the stack runs; exit 1 when it does not."""
    info = devstack.status(_home(args))
    if info is None:
        print("no stack running")
        return 1
    print(f"NATS      {info.nats_url}  (pid {info.nats_pid})")
    print(f"Postgres  {info.database_url}  (pid {info.postgres_pid})")
    return 0


def run_env(args: argparse.Namespace) -> int:
    """Print ``export`` lines, for ``eval "$(tessera dev env)"``."""
    info = devstack.status(_home(args))
    if info is None:
        raise devstack.StackError("no stack running: run `tessera dev up`")
    print(f"export NATS_URL={info.nats_url}")
    print(f"export DATABASE_URL={info.database_url}")
    return 0
