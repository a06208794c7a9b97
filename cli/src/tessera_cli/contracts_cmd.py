"""``tessera contracts dump``: write the JSON Schema of every event type."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import tessera_contracts
from tessera_contracts.schema import dump


def register(sub: Any) -> None:
    """Add the ``contracts`` command."""
    p = sub.add_parser("contracts", help="the system's event contracts")
    csub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    d = csub.add_parser("dump", help="write the JSON Schema of every event type")
    d.add_argument("--out", type=Path, default=Path("schemas"), help="folder to write (default ./schemas)")
    d.set_defaults(handler=run_dump)


def run_dump(args: argparse.Namespace) -> int:
    """Write the schemas and list them."""
    tessera_contracts.load_all()
    for path in dump(args.out):
        print(path)
    return 0
