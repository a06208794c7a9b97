"""Node heartbeats, as the scheduler hears them: the last time each node was heard from.

Node agents publish :class:`~tessera_contracts.heartbeat.Heartbeat` on ``hb.<node>`` (core NATS,
not the log). Every scheduler instance listens, standbys included, so a standby that takes over
already knows which nodes are alive. Times are this process's monotonic clock, in seconds; the
agent's own clock is never compared with ours.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from tessera_contracts.heartbeat import HEARTBEAT_FILTER, HEARTBEAT_ROOT, decode_heartbeat


class HeartbeatMonitor:
    """Subscribes to ``hb.>`` and remembers when each node last beat.

    Args:
        nc: a connected NATS client.
        mono: a monotonic clock, seconds (injected for tests).
    """

    def __init__(self, nc: NATS, mono: Callable[[], float] = time.monotonic) -> None:
        self.nc = nc
        self._mono = mono
        self._seen: dict[str, float] = {}
        self._sub: Subscription | None = None
        self.rejected = 0
        """Messages on ``hb.>`` that were not heartbeats, or named another node than their subject."""

    async def start(self) -> None:
        """Subscribe to every node's heartbeats."""
        if self._sub is None:
            self._sub = await self.nc.subscribe(HEARTBEAT_FILTER, cb=self._on_beat)

    async def stop(self) -> None:
        """Unsubscribe."""
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.unsubscribe()

    async def _on_beat(self, msg: Msg) -> None:
        try:
            beat = decode_heartbeat(msg.data)
        except msgspec.DecodeError:
            self.rejected += 1
            return
        if msg.subject != f"{HEARTBEAT_ROOT}.{beat.node}":
            self.rejected += 1
            return
        self._seen[beat.node] = self._mono()

    def last_seen(self, node: str) -> float:
        """Monotonic time of the node's last heartbeat; ``-inf`` when it was never heard."""
        return self._seen.get(node, float("-inf"))
