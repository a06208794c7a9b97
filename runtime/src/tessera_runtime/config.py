"""Runtime settings, read from the environment once at start-up."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Where the servers are and how the runtime talks to them.

    Environment variables: ``NATS_URL``, ``DATABASE_URL`` (unset: the embedded stack's, see
    ``tessera dev up``), ``TESSERA_HOME`` (default ``./.tessera``: the embedded stack's data),
    ``TESSERA_STREAM_REPLICAS`` (1; 3 in production), ``TESSERA_APPEND_TIMEOUT_S`` (5 seconds).
    """

    nats_url: str
    database_url: str
    home: Path
    stream_replicas: int = 1
    append_timeout_s: float = 5.0

    @classmethod
    def from_env(cls, *, nats_url: str | None = None, database_url: str | None = None) -> Settings:
        """Settings from the environment; explicit URLs win, then env vars, then the embedded stack.

        Raises:
            tessera_runtime.devstack.StackError: no URL given and no embedded stack running.
        """
        home = Path(os.environ.get("TESSERA_HOME", ".tessera")).resolve()
        if nats_url is None or database_url is None:
            from tessera_runtime.devstack import resolve_urls

            env_nats, env_db = resolve_urls(home)
            nats_url = nats_url or env_nats
            database_url = database_url or env_db
        return cls(
            nats_url=nats_url,
            database_url=database_url,
            home=home,
            stream_replicas=int(os.environ.get("TESSERA_STREAM_REPLICAS", "1")),
            append_timeout_s=float(os.environ.get("TESSERA_APPEND_TIMEOUT_S", "5")),
        )
