"""NATS and Postgres together, owned by this process: :class:`EmbeddedStack` and :class:`StackInfo`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from tessera_runtime.devstack.nats import EmbeddedNats
from tessera_runtime.devstack.postgres import EmbeddedPostgres
from tessera_runtime.devstack.process import StackError

__all__ = ["EmbeddedStack", "StackInfo"]


@dataclass(frozen=True, slots=True)
class StackInfo:
    """Where a running embedded stack is.

    Attributes:
        nats_url: ``nats://127.0.0.1:PORT``.
        database_url: ``postgresql://postgres@127.0.0.1:PORT/tessera``.
        nats_pid: process id of ``nats-server``.
        postgres_pid: process id of the postmaster.
        home: the stack's home directory (absolute).
    """

    nats_url: str
    database_url: str
    nats_pid: int
    postgres_pid: int
    home: Path


class EmbeddedStack:
    """NATS (JetStream) and Postgres together, owned by this process; data under ``home``.

    Use as a context manager (``with EmbeddedStack(home) as stack:`` gives the stack, started;
    leaving the block stops both servers) or call :meth:`start` / :meth:`stop`. The servers are
    reachable as :attr:`nats` and :attr:`postgres` (for ``restart()`` / ``kill()`` in tests).

    Args:
        home: data root; NATS in ``home/nats``, Postgres in ``home/postgres``.
        sync_interval: JetStream ``sync_interval`` (see :class:`EmbeddedNats`); ``None`` for the
            server default.
        nats_port: client port for NATS; ``None`` for a free one.
        postgres_port: TCP port for Postgres; ``None`` for a free one.
        nats_monitor_port: HTTP monitoring port for NATS; ``None`` for a free one.
    """

    def __init__(
        self,
        home: Path,
        sync_interval: str | None = None,
        *,
        nats_port: int | None = None,
        postgres_port: int | None = None,
        nats_monitor_port: int | None = None,
    ) -> None:
        self.home = Path(home).absolute()
        self.nats = EmbeddedNats(self.home / "nats", nats_port, sync_interval, monitor_port=nats_monitor_port)
        self.postgres = EmbeddedPostgres(self.home / "postgres", postgres_port)

    @property
    def info(self) -> StackInfo:
        """URLs and pids of the running stack.

        Raises:
            StackError: a server is not running.
        """
        nats_pid, pg_pid = self.nats.pid, self.postgres.pid
        if nats_pid is None or pg_pid is None:
            raise StackError("the embedded stack is not running")
        return StackInfo(
            nats_url=self.nats.url,
            database_url=self.postgres.url,
            nats_pid=nats_pid,
            postgres_pid=pg_pid,
            home=self.home,
        )

    def start(self) -> StackInfo:
        """Start NATS, then Postgres; on failure stop whatever started and re-raise.

        Raises:
            StackError: either server failed to start (see their ``start``).
        """
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            self.nats.start()
            self.postgres.start()
        except BaseException:
            self.stop()
            raise
        return self.info

    def stop(self) -> None:
        """Stop Postgres, then NATS (each gracefully, SIGKILL after :data:`STOP_TIMEOUT_S` seconds)."""
        try:
            self.postgres.stop()
        finally:
            self.nats.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
