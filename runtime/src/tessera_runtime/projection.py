"""What a projection is, and where the CLI finds them.

A projection is a read model in Postgres, a pure function of the events it has seen. It lives in
its own schema, ``proj_<name>``, which also holds its position (``_checkpoint``) and its set-aside
poison events (``_dead_letters``), so that a rebuilt schema can be swapped in whole.

Services register their projections under the ``tessera.projections`` entry-point group (value:
``module:attribute``, a :class:`Projection` instance), so ``tessera replay verify --all`` finds
every projection of every installed service without importing any service by name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

import asyncpg

from tessera_runtime.eventlog import StoredEvent

ENTRY_POINT_GROUP = "tessera.projections"
NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")  # also a dead-letter subject token (32 at most)


@runtime_checkable
class Projection(Protocol):
    """A read model built from the event log.

    Attributes:
        name: lower-case identifier; the live schema is ``proj_<name>``.
        version: bump it when ``ddl`` or ``apply`` change meaning; a projector that finds an
            older version in Postgres rebuilds the projection from the log.
        subjects: filter subjects of the events it reads (e.g. ``("ev.tenancy.>",)``).
        ddl: SQL creating its tables, with unqualified names (run with ``search_path`` set to
            its schema). Tables whose names start with ``_`` are the runtime's.

    ``apply`` is called inside a transaction with ``search_path`` set to the projection's schema;
    it must be deterministic (no clock, no randomness, no reads outside its schema) or replay
    verification will, rightly, report a difference. Any exception it raises marks the batch for
    per-event retries; an event that still fails after the projector's ``max_attempts`` is
    dead-lettered.
    """

    @property
    def name(self) -> str:
        """Lower-case identifier; the live schema is ``proj_<name>``."""
        ...

    @property
    def version(self) -> int:
        """Version of ``ddl`` and ``apply``."""
        ...

    @property
    def subjects(self) -> Sequence[str]:
        """Filter subjects of the events it reads."""
        ...

    @property
    def ddl(self) -> str:
        """SQL creating its tables, with unqualified names."""
        ...

    async def apply(self, conn: asyncpg.Connection, events: Sequence[StoredEvent]) -> None:
        """Apply events (ascending ``seq``, none applied before) to the read model."""
        ...


def schema_of(name: str, suffix: str = "") -> str:
    """The Postgres schema of projection ``name`` (``proj_<name>[__<suffix>]``).

    Raises:
        ValueError: ``name`` is not a lower-case identifier of at most 32 characters.
    """
    if not NAME.match(name):
        raise ValueError(f"invalid projection name {name!r}")
    return f"proj_{name}__{suffix}" if suffix else f"proj_{name}"


def registered_projections() -> dict[str, Projection]:
    """Every projection installed under the ``tessera.projections`` entry point, by name.

    Raises:
        TypeError: an entry point does not name a :class:`Projection`.
    """
    found: dict[str, Projection] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        obj = ep.load()
        if not isinstance(obj, Projection):
            raise TypeError(f"entry point {ep.name} = {ep.value} is not a Projection")
        found[obj.name] = obj
    return dict(sorted(found.items()))
