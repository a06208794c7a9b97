"""``tessera nodes list``: the nodes the scheduler knows, their state and allocation (platform admins)."""

from __future__ import annotations

import argparse
from typing import Any

from tessera_cli import output
from tessera_cli.client import Api, add_list_options, handles_errors, path

COLUMNS: list[output.Column] = [
    ("NODE", "node"),
    ("CLUSTER", "cluster"),
    ("REGION", "region"),
    ("STATE", "state"),
    ("GPUS", "gpus"),
    ("MODELS", "gpu_models"),
    ("ALLOCATED", lambda n: f"{output.gpus_from_milli(n.get('allocated_milli'))}/{n.get('gpus')}"),
    ("LABELS", "labels"),
    ("REGISTERED", "registered_at"),
]


def register(sub: Any) -> None:
    """Add ``nodes``."""
    p = sub.add_parser("nodes", help="GPU nodes as the scheduler sees them")
    nsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = nsub.add_parser("list", help="every node (platform admins)")
    add_list_options(ls)
    ls.set_defaults(handler=handles_errors(run_list))


def run_list(args: argparse.Namespace) -> int:
    """``GET /v1/nodes``, every page."""
    with Api.from_config() as api:
        page = api.list_all(path("nodes"), limit=args.limit, after=args.after)
    output.show_list(page, COLUMNS, as_json=args.json)
    return 0
