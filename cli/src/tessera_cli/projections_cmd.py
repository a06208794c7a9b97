"""``tessera projections``: run projectors as a service, and show where each projection stands."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import asyncpg

from tessera_cli.common import add_server_options, session
from tessera_runtime.errors import EventLogError
from tessera_runtime.projection import Projection, registered_projections, schema_of
from tessera_runtime.projector import quote_ident
from tessera_runtime.runner import ServiceContext, run_service


def register(sub: Any) -> None:
    """Add the ``projections`` command."""
    p = sub.add_parser("projections", help="projections of the event log")
    psub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    r = psub.add_parser("run", help="keep projections up to date (a long-running service; SIGTERM stops it)")
    r.add_argument("names", nargs="*", help="projections to run (default: all registered)")
    add_server_options(r)
    r.set_defaults(handler=run_projectors)
    s = psub.add_parser("status", help="position, lag and dead letters of each projection")
    add_server_options(s)
    s.set_defaults(handler=status)


def select(names: list[str]) -> list[Projection]:
    """The registered projections named (all when ``names`` is empty).

    Raises:
        LookupError: a name is not registered.
    """
    known = registered_projections()
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise LookupError(f"unknown projection(s) {', '.join(unknown)}; registered: {', '.join(known) or 'none'}")
    return [known[n] for n in names] if names else list(known.values())


async def run_projectors(args: argparse.Namespace) -> int:
    """Run the selected projectors until SIGTERM."""
    from tessera_runtime.config import Settings

    projections = select(args.names)

    async def main(ctx: ServiceContext) -> None:
        for projection in projections:
            ctx.project(projection)

    settings = Settings.from_env(nats_url=args.nats_url, database_url=args.database_url)
    await run_service("projections", main, settings=settings)
    return 0


async def status(args: argparse.Namespace) -> int:
    """Print one line per projection: name, position, lag to the head, dead letters.

    The lag is counted in stream sequences (events of every domain), an upper bound on the
    events a projection that reads some domains only still has to apply. A position past the
    head means the stream was recreated under the projection: it is flagged, not hidden.
    """
    async with session(args) as s:
        try:
            head = await s.log.head()
        except EventLogError as exc:
            print(f"tessera: {exc}", file=sys.stderr)
            head = 0
        print(f"{'projection':<20} {'position':>10} {'lag':>8} {'dead letters':>12}")
        async with s.pool.acquire() as conn:
            for projection in select([]):
                q = quote_ident(schema_of(projection.name))
                try:
                    position = await conn.fetchval(f"SELECT position FROM {q}._checkpoint")
                    dead = await conn.fetchval(f"SELECT count(*) FROM {q}._dead_letters")
                except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
                    print(f"{projection.name:<20} {'(not built)':>10}")
                    continue
                note = "  AHEAD OF THE LOG: rebuild it" if position > head else ""
                print(f"{projection.name:<20} {position:>10} {head - position:>8} {dead:>12}{note}")
    return 0
