"""``tessera tenants list|get|create``."""

from __future__ import annotations

import argparse
from typing import Any

from tessera_cli import output
from tessera_cli.client import Api, add_list_options, add_read_options, handles_errors, path

COLUMNS: list[output.Column] = [
    ("TENANT", "tenant"),
    ("DISPLAY NAME", "display_name"),
    ("CREATED", "created_at"),
]


def register(sub: Any) -> None:
    """Add ``tenants``."""
    p = sub.add_parser("tenants", help="tenants (create: platform admins)")
    tsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = tsub.add_parser("list", help="the tenants the key can see")
    add_list_options(ls)
    ls.set_defaults(handler=handles_errors(run_list))
    get = tsub.add_parser("get", help="one tenant")
    get.add_argument("tenant")
    add_read_options(get)
    get.set_defaults(handler=handles_errors(run_get))
    create = tsub.add_parser("create", help="create a tenant")
    create.add_argument("tenant", help="lower-case letters, digits and '-'")
    create.add_argument("--display-name", help="free text (default: the tenant's name)")
    add_read_options(create)
    create.set_defaults(handler=handles_errors(run_create))


def run_list(args: argparse.Namespace) -> int:
    """``GET /v1/tenants``, every page."""
    with Api.from_config() as api:
        page = api.list_all(path("tenants"), limit=args.limit, after=args.after)
    output.show_list(page, COLUMNS, as_json=args.json)
    return 0


def run_get(args: argparse.Namespace) -> int:
    """``GET /v1/tenants/{tenant}``."""
    with Api.from_config() as api:
        output.show(api.get(path("tenants", args.tenant)), COLUMNS, as_json=args.json)
    return 0


def run_create(args: argparse.Namespace) -> int:
    """``POST /v1/tenants``."""
    body = {"tenant": args.tenant, "display_name": args.display_name or args.tenant}
    with Api.from_config() as api:
        output.show(api.post(path("tenants"), body), COLUMNS, as_json=args.json)
    return 0
