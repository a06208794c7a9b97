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
import contextlib
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
        self.spawn(projector.run(self.stop), name=f"projector:{projection.name}")
        return projector


class ServiceFailed(RuntimeError):
    """A task of the service ended with an error it could not recover from."""


async def _until_stopped(ctx: ServiceContext) -> BaseException | None:
    """Wait for the stop signal, or for a task to fail first (then return its error)."""
    stopped = asyncio.create_task(ctx.stop.wait(), name="stop-signal")
    try:
        while not ctx.stop.is_set():
            running = [t for t in ctx.tasks if not t.done()]
            done, _ = await asyncio.wait([stopped, *running], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopped and not task.cancelled() and task.exception() is not None:
                    return task.exception()
            if not running:
                await stopped
        return None
    finally:
        stopped.cancel()


async def _close_nats(nc: NATS) -> None:
    """Drain when connected (in-flight replies go out); when NATS is down, just close."""
    try:
        if nc.is_connected:
            await asyncio.wait_for(nc.drain(), 5)
            return
    except Exception:  # falls through to a plain close
        pass
    with contextlib.suppress(Exception):
        await nc.close()


async def run_service(
    name: str,
    main: Callable[[ServiceContext], Awaitable[None]],
    *,
    settings: Settings | None = None,
    grace_s: float = 20.0,
) -> None:
    """Run one service until SIGTERM/SIGINT, then shut it down gracefully.

    A task that fails (a projector meeting an error it cannot retry, say) stops the service
    at once, logged, rather than leaving a process that looks alive and does nothing.

    Raises:
        ServiceFailed: a task failed; the caller's process should exit non-zero.
    """
    logger = logs.configure(name)
    tracing.configure(name)
    settings = settings or Settings.from_env()
    nc = await connect.connect_nats(settings.nats_url, name)
    pool = await connect.connect_postgres(settings.database_url)
    log = EventLog(nc, timeout_s=settings.append_timeout_s)
    ctx = ServiceContext(name=name, settings=settings, nc=nc, pool=pool, log=log, logger=logger)
    failure: BaseException | None = None
    try:
        await log.ensure_streams(settings.stream_replicas)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, ctx.stop.set)
        await main(ctx)
        logger.info("service.started")
        failure = await _until_stopped(ctx)
        if failure is not None:
            logger.error("service.task_failed", error=repr(failure))
        ctx.stop.set()
        logger.info("service.stopping", tasks=len(ctx.tasks))
        if ctx.tasks:
            _, pending = await asyncio.wait(ctx.tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
    finally:
        await _close_nats(nc)
        await pool.close()
        logger.info("service.stopped")
    if failure is not None:
        raise ServiceFailed(f"{name}: {failure}") from failure


def main(name: str, start: Callable[[ServiceContext], Awaitable[None]]) -> None:
    """Process entry point of a service: run it; exit with status 1 if a task failed (already logged)."""
    try:
        asyncio.run(run_service(name, start))
    except ServiceFailed:
        raise SystemExit(1) from None
