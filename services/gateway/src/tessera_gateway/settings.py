"""The gateway's settings, read from the environment once at start-up."""

from __future__ import annotations

import os

import msgspec

from tessera_runtime.config import Settings

DEFAULT_BUCKET = "TESSERA_IDEMPOTENCY"


class GatewaySettings(msgspec.Struct, frozen=True, kw_only=True):
    """How the gateway talks to NATS and what it accepts.

    Environment variables: ``NATS_URL`` (unset: the embedded stack's, see ``tessera dev up``),
    ``TESSERA_RPC_TIMEOUT_S`` (5 seconds per forwarded operation), ``TESSERA_IDEMPOTENCY_BUCKET``
    (``TESSERA_IDEMPOTENCY``), ``TESSERA_STREAM_REPLICAS`` (replicas of that bucket, 1; 3 in
    production).
    """

    nats_url: str
    rpc_timeout_s: float = 5.0
    max_body_bytes: int = 64 * 1024
    idempotency_bucket: str = DEFAULT_BUCKET
    idempotency_ttl_s: float = 24 * 3600.0
    idempotency_replicas: int = 1

    @property
    def pending_ttl_s(self) -> float:
        """How long an in-flight ``Idempotency-Key`` claim blocks a duplicate before it counts as abandoned."""
        return 2 * self.rpc_timeout_s + 10.0

    @classmethod
    def from_env(cls, *, nats_url: str | None = None) -> GatewaySettings:
        """Settings from the environment; an explicit URL wins, then ``NATS_URL``, then the embedded stack.

        Raises:
            tessera_runtime.devstack.StackError: no NATS URL anywhere and no embedded stack running.
            ValueError: a numeric variable does not parse or is not positive.
        """
        url = nats_url or os.environ.get("NATS_URL") or Settings.from_env().nats_url
        timeout = float(os.environ.get("TESSERA_RPC_TIMEOUT_S", "5"))
        if timeout <= 0:
            raise ValueError(f"TESSERA_RPC_TIMEOUT_S must be positive, got {timeout:g}")
        return cls(
            nats_url=url,
            rpc_timeout_s=timeout,
            idempotency_bucket=os.environ.get("TESSERA_IDEMPOTENCY_BUCKET") or DEFAULT_BUCKET,
            idempotency_replicas=int(os.environ.get("TESSERA_STREAM_REPLICAS", "1")),
        )
