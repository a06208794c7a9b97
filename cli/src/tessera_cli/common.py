"""Helpers shared by the CLI's commands: settings and connections for one command's lifetime."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
from nats.aio.client import Client as NATS

from tessera_runtime import connect
from tessera_runtime.config import Settings
from tessera_runtime.eventlog import EventLog


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """``--nats-url`` / ``--database-url`` (default: env vars, then the running dev stack)."""
    parser.add_argument("--nats-url", help="NATS server (default: $NATS_URL, else the dev stack)")
    parser.add_argument("--database-url", help="Postgres (default: $DATABASE_URL, else the dev stack)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")


@dataclass
class Session:
    """Connections a command uses."""

    settings: Settings
    nc: NATS
    pool: asyncpg.Pool
    log: EventLog


@asynccontextmanager
async def session(args: argparse.Namespace, name: str = "tessera-cli") -> AsyncIterator[Session]:
    """Connect, failing after 5 s rather than retrying forever like a service."""
    settings = Settings.from_env(nats_url=args.nats_url, database_url=args.database_url)
    nc = await connect.connect_nats(settings.nats_url, name, deadline_s=5)
    try:
        pool = await connect.connect_postgres(settings.database_url, deadline_s=5)
        try:
            # Read-only on the streams: creating or reconfiguring them is the services' business.
            log = EventLog(nc, timeout_s=settings.append_timeout_s)
            yield Session(settings, nc, pool, log)
        finally:
            await pool.close()
    finally:
        await nc.drain()
