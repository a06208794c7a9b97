"""Wiring of the tenancy service: its projectors and its RPC operations, under the service runner.

Tenancy also keeps the platform's audit index (``audit``: one row per event of every domain),
as the service that owns identity and access: "who did what, when" is its question to answer.
"""

from __future__ import annotations

from tessera_runtime import runner
from tessera_runtime.audit import AUDIT
from tessera_runtime.rpc import RpcServer
from tessera_runtime.runner import ServiceContext
from tessera_tenancy import keys
from tessera_tenancy.handlers import TenancyHandlers
from tessera_tenancy.projections import TENANCY

SERVICE = "tenancy"


async def start(ctx: ServiceContext) -> RpcServer:
    """Start the projector and the RPC server; returns the server (stopped at shutdown)."""
    projector = ctx.project(TENANCY)
    ctx.project(AUDIT)
    handlers = TenancyHandlers(ctx.log, ctx.pool, projector, keys.load_pepper(ctx.settings.home))
    server = RpcServer(ctx.nc, SERVICE)
    handlers.register(server)
    await projector.setup()  # the schema exists before the first query
    await server.start()

    async def stop_rpc() -> None:
        await ctx.stop.wait()
        await server.stop()

    ctx.spawn(stop_rpc(), name="rpc-drain")
    return server


async def _main(ctx: ServiceContext) -> None:
    await start(ctx)


def main() -> None:
    """``python -m tessera_tenancy``: run until SIGTERM (exit status 1 if a task fails)."""
    runner.main(SERVICE, _main)
