"""Wiring: the Litestar application and the process entry point (``python -m tessera_gateway``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator

import uvicorn
from litestar import Litestar, Router
from litestar.datastructures import State
from litestar.di import Provide
from nats.aio.client import Client as NATS

from tessera_gateway.auth import BearerAuth
from tessera_gateway.context import STATE_KEY, Gateway
from tessera_gateway.forward import provide_read, provide_write
from tessera_gateway.handlers import health, scheduler, tenancy
from tessera_gateway.idempotency import IdempotencyStore
from tessera_gateway.observability import RequestLog
from tessera_gateway.openapi import SECURITY, config, forbid_unknown_fields
from tessera_gateway.problems import EXCEPTION_HANDLERS
from tessera_gateway.settings import GatewaySettings
from tessera_runtime import connect, logs, tracing

SERVICE = "gateway"


async def create_app(nc: NATS, settings: GatewaySettings) -> Litestar:
    """The gateway application on the connection ``nc`` (opens or creates the idempotency bucket).

    Raises:
        nats.errors.Error: JetStream is unavailable, so the idempotency bucket cannot be opened.
    """
    store = await IdempotencyStore.open(
        nc.jetstream(),
        bucket=settings.idempotency_bucket,
        ttl_s=settings.idempotency_ttl_s,
        pending_ttl_s=settings.pending_ttl_s,
        replicas=settings.idempotency_replicas,
    )
    gateway = Gateway(nc=nc, settings=settings, idempotency=store)
    v1 = Router(
        path="/v1",
        middleware=[BearerAuth],
        security=SECURITY,
        dependencies={
            "read": Provide(provide_read, sync_to_thread=False),
            "write": Provide(provide_write, sync_to_thread=False),
        },
        route_handlers=[tenancy.router(), scheduler.router()],
    )
    app = Litestar(
        route_handlers=[health.healthz, v1],
        state=State({STATE_KEY: gateway}),
        exception_handlers=EXCEPTION_HANDLERS,
        request_max_body_size=settings.max_body_bytes,
        openapi_config=config(),
        logging_config=None,
        debug=False,
    )
    forbid_unknown_fields(app)
    # Litestar's middleware runs only for matched routes; wrapping the whole handler gives unknown
    # routes and 405s a request id and an access log line too (the same hook its OTel plugin uses).
    app.asgi_handler = RequestLog(app.asgi_handler)
    return app


class _Server(uvicorn.Server):
    """uvicorn's server, where SIGINT/SIGTERM only stop serving.

    uvicorn re-raises a captured signal after its shutdown, which would kill the process before
    NATS is drained.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Turn SIGINT/SIGTERM into a graceful shutdown while serving."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)


async def serve(host: str, port: int, settings: GatewaySettings) -> None:
    """Connect to NATS, then serve HTTP on ``host:port`` until SIGINT/SIGTERM; then drain NATS."""
    logger = logs.configure(SERVICE)
    tracing.configure(SERVICE)
    nc = await connect.connect_nats(settings.nats_url, SERVICE)
    try:
        app = await create_app(nc, settings)
        server = _Server(
            uvicorn.Config(
                app, host=host, port=port, log_config=None, access_log=False, server_header=False, lifespan="on"
            )
        )
        logger.info("gateway.starting", url=f"http://{host}:{port}", rpc_timeout_s=settings.rpc_timeout_s)
        await server.serve()
    finally:
        await nc.drain()
        logger.info("gateway.stopped")


def main(argv: list[str] | None = None) -> None:
    """``python -m tessera_gateway [--host H] [--port N]``; NATS from ``NATS_URL`` or the embedded stack."""
    parser = argparse.ArgumentParser(prog="tessera-gateway", description="Tessera's REST API gateway.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    args = parser.parse_args(argv)
    try:
        settings = GatewaySettings.from_env()
    except Exception as exc:  # no NATS_URL and no embedded stack, or a bad number
        print(f"tessera-gateway: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    asyncio.run(serve(args.host, args.port, settings))
