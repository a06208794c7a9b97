"""``tessera replay``: rebuild projections from the log, or verify them against a rebuild."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import msgspec

from tessera_cli.common import add_server_options, session
from tessera_cli.projections_cmd import select
from tessera_runtime import replay


def register(sub: Any) -> None:
    """Add the ``replay`` command."""
    p = sub.add_parser("replay", help="rebuild or verify projections by replaying the log")
    rsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    v = rsub.add_parser("verify", help="rebuild in a shadow schema and compare with the live projection")
    group = v.add_mutually_exclusive_group(required=True)
    group.add_argument("--all", action="store_true", help="every registered projection")
    group.add_argument("names", nargs="*", default=[], help="projections to verify")
    v.add_argument("--json", action="store_true", help="print the results as JSON")
    add_server_options(v)
    v.set_defaults(handler=run_verify)
    r = rsub.add_parser("rebuild", help="rebuild projections from sequence 1 and swap them in")
    r.add_argument("names", nargs="+", help="projections to rebuild")
    add_server_options(r)
    r.set_defaults(handler=run_rebuild)


async def run_verify(args: argparse.Namespace) -> int:
    """Verify; exit 1 and print the differing rows if any projection differs."""
    if not args.all and not args.names:
        raise ValueError("name the projections to verify, or pass --all")
    projections = select([] if args.all else args.names)
    results = []
    async with session(args) as s:
        for projection in projections:
            try:
                results.append(await replay.verify(s.pool, s.log, projection))
            except LookupError:
                if not args.all:
                    raise
                print(f"{projection.name}: not built yet (no live schema), skipped", file=sys.stderr)
    if args.json:
        print(json.dumps(msgspec.to_builtins(results), indent=2))
    else:
        for r in results:
            verdict = "equal" if r.equal else "DIFFERENT"
            print(f"{r.projection}: {verdict} at sequence {r.position} (checksum {r.live_checksum[:16]})")
            for d in r.diffs:
                for row in d.only_in_live:
                    print(f"  {d.table}: only in live:    {row}")
                for row in d.only_in_rebuilt:
                    print(f"  {d.table}: only in rebuilt: {row}")
    if not projections:
        print("no projections registered", file=sys.stderr)
    return 0 if all(r.equal for r in results) else 1


async def run_rebuild(args: argparse.Namespace) -> int:
    """Rebuild each named projection and swap it in."""
    projections = select(args.names)  # unknown names fail before any connection is tried
    async with session(args) as s:
        for projection in projections:
            position = await replay.rebuild(s.pool, s.log, projection)
            print(f"{projection.name}: rebuilt to sequence {position}")
    return 0
