"""The service runner: the same start-up, shutdown and reconnection for every service.

A service is a name plus an async ``main(ctx)`` that starts its work as tasks (projectors,
request handlers) and returns. The runner:

- configures structured logs and OpenTelemetry for the process;
- connects to NATS and Postgres (retrying until they answer) and ensures the streams exist;
- on SIGTERM or SIGINT sets ``ctx.stop``: projectors finish the batch in hand and return; then
  the runner waits for the tasks (up to ``grace_s``), drains NATS and closes the pool.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from nats.aio.client import Client as NATS

from tessera_runtime import connect, logs, tracing
from tessera_runtime.config import Settings
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projection import Projection
from tessera_runtime.projector import Projector


@dataclass
class ServiceContext:
    """What a service's ``main`` gets: connections, the log, settings, and the stop signal."""

    name: str
    settings: Settings
    nc: NATS
    pool: asyncpg.Pool
    log: EventLog
    logger: Any
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` as one of the service's tasks (awaited at shutdown)."""
        self.tasks.append(asyncio.create_task(coro, name=name))

    def project(self, projection: Projection, **options: Any) -> Projector:
        """Start a projector for ``projection`` (options as for :class:`Projector`)."""
        projector = Projector(projection, self.pool, self.log, **options)
        self.spawn(follow(projector, self.stop), name=f"projector:{projection.name}")
        return projector


async def follow(projector: Projector, stop: asyncio.Event) -> None:
    """Run a projector, first rebuilding it if its schema holds another version."""
    from tessera_runtime import replay

    await projector.setup()
    if projector.needs_rebuild:
        projector._log.info("projector.rebuild", reason="version changed")
        await replay.rebuild(projector.pool, projector.log, projector.projection)
    await projector.run(stop)


async def run_service(
    name: str,
    main: Callable[[ServiceContext], Awaitable[None]],
    *,
    settings: Settings | None = None,
    grace_s: float = 20.0,
) -> None:
    """Run one service until SIGTERM/SIGINT, then shut it down gracefully."""
    logger = logs.configure(name)
    tracing.configure(name)
    settings = settings or Settings.from_env()
    nc = await connect.connect_nats(settings.nats_url, name)
    pool = await connect.connect_postgres(settings.database_url)
    log = EventLog(nc, timeout_s=settings.append_timeout_s)
    await log.ensure_streams(settings.stream_replicas)
    ctx = ServiceContext(name=name, settings=settings, nc=nc, pool=pool, log=log, logger=logger)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, ctx.stop.set)
    logger.info("service.started")
    try:
        await main(ctx)
        await ctx.stop.wait()
        logger.info("service.stopping", tasks=len(ctx.tasks))
        done, pending = await asyncio.wait(ctx.tasks, timeout=grace_s) if ctx.tasks else (set(), set())
        for task in pending:
            task.cancel()
        for task in done:
            if task.exception() is not None:
                logger.error("service.task_failed", task=task.get_name(), error=repr(task.exception()))
    finally:
        await nc.drain()
        await pool.close()
        logger.info("service.stopped")
