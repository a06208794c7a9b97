"""The gateway's process-wide state: the NATS connection, settings and the idempotency store."""

from __future__ import annotations

from dataclasses import dataclass

from litestar.datastructures import State
from nats.aio.client import Client as NATS

from tessera_gateway.idempotency import IdempotencyStore
from tessera_gateway.settings import GatewaySettings

STATE_KEY = "gateway"


@dataclass(frozen=True)
class Gateway:
    """What every request handler shares; kept in ``app.state`` under :data:`STATE_KEY`."""

    nc: NATS
    settings: GatewaySettings
    idempotency: IdempotencyStore

    @staticmethod
    def of(state: State) -> Gateway:
        """The gateway in an app's ``state``.

        Raises:
            RuntimeError: the app was not built by :func:`tessera_gateway.app.create_app`.
        """
        gateway = state.get(STATE_KEY)
        if not isinstance(gateway, Gateway):
            raise RuntimeError("app was not built by tessera_gateway.app.create_app")
        return gateway
