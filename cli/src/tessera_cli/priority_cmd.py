"""``tessera priority-classes list|set``: the priority classes jobs are queued by."""

from __future__ import annotations

import argparse
from typing import Any

from tessera_cli import output
from tessera_cli.client import Api, add_list_options, add_read_options, handles_errors, path

COLUMNS: list[output.Column] = [
    ("NAME", "name"),
    ("VALUE", "value"),
    ("PREEMPTIBLE", "preemptible"),
    ("DESCRIPTION", "description"),
]


def register(sub: Any) -> None:
    """Add ``priority-classes``."""
    p = sub.add_parser("priority-classes", help="priority classes (set: platform admins)")
    psub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = psub.add_parser("list", help="every priority class")
    add_list_options(ls)
    ls.set_defaults(handler=handles_errors(run_list))

    put = psub.add_parser("set", help="define or change a priority class")
    put.add_argument("name")
    put.add_argument("--value", type=int, required=True, help="higher is scheduled first")
    put.add_argument("--preemptible", action="store_true", help="its jobs may be preempted")
    put.add_argument("--description", default="", help="free text")
    add_read_options(put)
    put.set_defaults(handler=handles_errors(run_set))


def run_list(args: argparse.Namespace) -> int:
    """``GET /v1/priority-classes``, every page."""
    with Api.from_config() as api:
        page = api.list_all(path("priority-classes"), limit=args.limit, after=args.after)
    output.show_list(page, COLUMNS, as_json=args.json)
    return 0


def run_set(args: argparse.Namespace) -> int:
    """``PUT /v1/priority-classes/{name}``."""
    body = {"value": args.value, "preemptible": args.preemptible, "description": args.description}
    with Api.from_config() as api:
        output.show(api.put(path("priority-classes", args.name), body), COLUMNS, as_json=args.json)
    return 0
