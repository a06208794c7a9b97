"""Connections to NATS and Postgres that survive the servers' restarts.

- NATS: nats-py reconnects by itself once connected; here the *first* connection is retried too,
  with exponential backoff, and reconnection never gives up (``max_reconnect_attempts=-1``).
  Publishes made while disconnected wait in the client's buffer (up to 64 MiB).
- Postgres: an asyncpg pool; a connection broken by a server restart is discarded by the pool
  and replaced on the next acquire, and callers treat the error as transient
  (:data:`tessera_runtime.projector.TRANSIENT_DB_ERRORS`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
import nats
from nats.aio.client import Client as NATS

from tessera_runtime import logs

T = TypeVar("T")


async def with_backoff(
    what: str, attempt: Callable[[], Awaitable[T]], *, deadline_s: float = 60.0, max_wait_s: float = 2.0
) -> T:
    """Call ``attempt`` until it succeeds, waiting 0.1 s doubling to ``max_wait_s`` between tries.

    Raises:
        TimeoutError: still failing after ``deadline_s`` seconds (the last error is chained).
    """
    log = logs.get("connect")
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    wait = 0.1
    while True:
        try:
            return await attempt()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, nats.errors.Error) as exc:
            if loop.time() + wait > end:
                raise TimeoutError(f"could not connect to {what} within {deadline_s:.0f}s: {exc}") from exc
            log.warning("connect.retry", target=what, error=repr(exc), wait_s=wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, max_wait_s)


async def connect_nats(url: str, name: str, *, deadline_s: float = 60.0) -> NATS:
    """A NATS connection named ``name`` that reconnects forever (0.25 s between attempts)."""
    log = logs.get("nats")

    async def on_disconnect() -> None:
        log.info("nats.disconnected", client=name)

    async def on_reconnect() -> None:
        log.info("nats.reconnected", client=name)

    async def on_error(exc: Exception) -> None:
        log.warning("nats.error", client=name, error=repr(exc))

    async def attempt() -> NATS:
        # The first connection fails fast (with_backoff retries it, up to its deadline); once
        # connected, the client reconnects forever.
        nc = await nats.connect(
            url,
            name=name,
            max_reconnect_attempts=1,  # nats-py would otherwise retry the first connection forever
            reconnect_time_wait=0.25,
            connect_timeout=2,
            allow_reconnect=False,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
            error_cb=on_error,
            pending_size=64 * 1024 * 1024,
        )
        nc.options["allow_reconnect"] = True
        nc.options["max_reconnect_attempts"] = -1
        return nc

    return await with_backoff(f"NATS at {url}", attempt, deadline_s=deadline_s)


async def connect_postgres(
    url: str, *, min_size: int = 2, max_size: int = 10, deadline_s: float = 60.0
) -> asyncpg.Pool:
    """An asyncpg pool, retried until the server answers."""

    async def attempt() -> asyncpg.Pool:
        pool = await asyncpg.create_pool(url, min_size=min_size, max_size=max_size, command_timeout=60)
        assert pool is not None
        return pool

    return await with_backoff("Postgres", attempt, deadline_s=deadline_s)
