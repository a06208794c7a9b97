"""Wiring of the scheduler service: projector, RPC operations, heartbeats, and the leader election.

Every instance follows the log into the projection and answers the operations (queue group
``scheduler``); one of them at a time, the holder of the lease, also decides
(:mod:`tessera_scheduler.leader`, :mod:`tessera_scheduler.handlers.decider`). Run two for a hot
standby: ``python -m tessera_scheduler --instance scheduler_standby``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec
from nats.aio.client import Client as NATS

from tessera_runtime import runner
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.rpc import Call, RpcServer
from tessera_runtime.runner import ServiceContext
from tessera_scheduler.domain.core import CoreConfig, SchedulerCore
from tessera_scheduler.handlers import Health, SchedulerHandlers
from tessera_scheduler.handlers.decider import Core, CoreFactory, Decider
from tessera_scheduler.heartbeats import HeartbeatMonitor
from tessera_scheduler.leader import LEASE_BUCKET, Elector, Lease, new_holder_id
from tessera_scheduler.placement import policy_named
from tessera_scheduler.projections import SCHEDULER

SERVICE = "scheduler"


class SchedulerSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The scheduler's own settings (seconds), from ``TESSERA_SCHEDULER_*`` environment variables.

    Attributes:
        node_timeout_s: a registered node silent this long is lost (``..._NODE_TIMEOUT_S``, 30).
        lease_s: how long the leader's lease lasts without renewal (``..._LEASE_S``, 5).
        renew_s: seconds between the leader's renewals (``..._RENEW_S``, 1).
        poll_s: seconds between a standby's looks at the lease (``..._POLL_S``, 1).
        cycle_s: longest wait for new events before deciding again (``..._CYCLE_S``, 0.2).
        lease_bucket: the KV bucket of the lease (``..._LEASE_BUCKET``, ``TESSERA_LEASES``).
        instance: this instance's name, when it answers its own ``rpc.<instance>.health`` too
            (``--instance``; the supervisor's standby row).
        placement: the core's placement policy (``..._PLACEMENT``: ``fgd``, ``best-fit``, ``first-fit``).
        min_runtime_s: a job runs at least this long before it can be preempted (``..._MIN_RUNTIME_S``, 300).
        max_preemptions: a job preempted this often is not preempted again (``..._MAX_PREEMPTIONS``, 3).
        starvation_s: a head job waiting this long gets a reservation (``..._STARVATION_S``, 900).
    """

    node_timeout_s: float = 30.0
    lease_s: float = 5.0
    renew_s: float = 1.0
    poll_s: float = 1.0
    cycle_s: float = 0.2
    lease_bucket: str = LEASE_BUCKET
    instance: str | None = None
    placement: str = "fgd"
    min_runtime_s: float = 300.0
    max_preemptions: int = 3
    starvation_s: float = 900.0

    def core_config(self) -> CoreConfig:
        """The scheduler core's tunables."""
        return CoreConfig(
            placement=self.placement,
            min_runtime_s=self.min_runtime_s,
            max_preemptions=self.max_preemptions,
            starvation_s=self.starvation_s,
        )

    @classmethod
    def from_env(cls, instance: str | None = None) -> SchedulerSettings:
        """Settings from the environment.

        Raises:
            ValueError: a number does not parse, is not positive, or the renewal is not shorter than the lease.
        """
        prefix = "TESSERA_SCHEDULER_"
        numbers: dict[str, Any] = {}
        for name in ("node_timeout_s", "lease_s", "renew_s", "poll_s", "cycle_s", "min_runtime_s", "starvation_s"):
            raw = os.environ.get(prefix + name.upper())
            if raw is not None:
                value = float(raw)
                if not value >= 0 or (value == 0 and name != "min_runtime_s"):
                    raise ValueError(f"{prefix}{name.upper()} must be positive, got {raw}")
                numbers[name] = value
        if (raw := os.environ.get(prefix + "MAX_PREEMPTIONS")) is not None:
            numbers["max_preemptions"] = int(raw)
        settings = cls(
            **numbers,
            lease_bucket=os.environ.get(prefix + "LEASE_BUCKET") or LEASE_BUCKET,
            placement=os.environ.get(prefix + "PLACEMENT") or "fgd",
            instance=instance,
        )
        policy_named(settings.placement)  # raises ValueError/KeyError for an unknown policy
        if settings.renew_s >= settings.lease_s:
            raise ValueError("the lease must be longer than the renewal interval")
        return settings


def core_factory_for(settings: SchedulerSettings) -> CoreFactory:
    """Makes fresh :class:`~tessera_scheduler.domain.core.SchedulerCore` instances configured by ``settings``."""
    config = settings.core_config()

    def make() -> Core:
        return SchedulerCore(config)

    return make


@dataclass
class Scheduler:
    """One running scheduler instance (what :func:`start` wires; tests drive it directly)."""

    projector: Projector
    handlers: SchedulerHandlers
    server: RpcServer
    heartbeats: HeartbeatMonitor
    decider: Decider
    elector: Elector
    health_server: RpcServer | None = None

    async def stop(self) -> None:
        """Stop answering and listening (the elector and projector stop with their ``stop`` event)."""
        await self.server.stop()
        if self.health_server is not None:
            await self.health_server.stop()
        await self.heartbeats.stop()


async def build(
    nc: NATS,
    log: EventLog,
    pool: asyncpg.Pool,
    projector: Projector,
    settings: SchedulerSettings,
    *,
    core_factory: CoreFactory | None = None,
    holder: str | None = None,
    replicas: int = 1,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Scheduler:
    """Wire and start an instance's listeners (the caller runs ``projector.run`` and ``elector.run``)."""
    heartbeats = HeartbeatMonitor(nc)
    decider = Decider(
        log,
        core_factory or core_factory_for(settings),
        heartbeats,
        node_timeout_s=settings.node_timeout_s,
        cycle_s=settings.cycle_s,
    )
    lease = await Lease.open(
        nc.jetstream(), holder or new_holder_id(), settings.lease_s, bucket=settings.lease_bucket, replicas=replicas
    )
    elector = Elector(log, lease, decider.lead, renew_s=settings.renew_s, poll_s=settings.poll_s)
    handlers = SchedulerHandlers(log, pool, projector, clock, is_leader=lambda: elector.is_leader)
    server = RpcServer(nc, SERVICE)
    handlers.register(server)
    health_server = None
    if settings.instance and settings.instance != SERVICE:
        health_server = RpcServer(nc, settings.instance)

        async def health(call: Call, body: None) -> Health:
            return Health(leader=elector.is_leader)

        health_server.operation("health")(health)
    await projector.setup()  # the schema exists before the first query
    await heartbeats.start()
    await server.start()
    if health_server is not None:
        await health_server.start()
    return Scheduler(projector, handlers, server, heartbeats, decider, elector, health_server)


async def start(ctx: ServiceContext, settings: SchedulerSettings) -> Scheduler:
    """Start the projector, the RPC server, heartbeats and the elector under the service runner."""
    projector = ctx.project(SCHEDULER)
    scheduler = await build(ctx.nc, ctx.log, ctx.pool, projector, settings, replicas=ctx.settings.stream_replicas)
    ctx.spawn(scheduler.elector.run(ctx.stop), name="elector")

    async def stop_rpc() -> None:
        await ctx.stop.wait()
        await scheduler.stop()

    ctx.spawn(stop_rpc(), name="rpc-drain")
    return scheduler


def main(argv: list[str] | None = None) -> None:
    """``python -m tessera_scheduler [--instance NAME]``: run until SIGTERM (exit status 1 if a task fails)."""
    parser = argparse.ArgumentParser(prog="tessera-scheduler", description="Tessera's scheduler service.")
    parser.add_argument(
        "--instance", help="a name for this instance ([a-z][a-z0-9_]*); it also answers rpc.<NAME>.health"
    )
    args = parser.parse_args(argv)
    try:
        settings = SchedulerSettings.from_env(args.instance)
    except ValueError as exc:
        parser.error(str(exc))

    async def _main(ctx: ServiceContext) -> None:
        await start(ctx, settings)

    runner.main(SERVICE, _main)
