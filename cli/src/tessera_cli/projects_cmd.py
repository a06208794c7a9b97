"""``tessera projects list|get|create`` (within one tenant, ``-t``)."""

from __future__ import annotations

import argparse
from typing import Any

from tessera_cli import output
from tessera_cli.client import Api, add_list_options, add_read_options, add_tenant_option, handles_errors, path

COLUMNS: list[output.Column] = [
    ("PROJECT", "project"),
    ("TENANT", "tenant"),
    ("DISPLAY NAME", "display_name"),
    ("CREATED", "created_at"),
]


def register(sub: Any) -> None:
    """Add ``projects``."""
    p = sub.add_parser("projects", help="projects of a tenant")
    psub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = psub.add_parser("list", help="the tenant's projects")
    add_tenant_option(ls)
    add_list_options(ls)
    ls.set_defaults(handler=handles_errors(run_list))
    get = psub.add_parser("get", help="one project")
    add_tenant_option(get)
    get.add_argument("project")
    add_read_options(get)
    get.set_defaults(handler=handles_errors(run_get))
    create = psub.add_parser("create", help="create a project (tenant admins)")
    add_tenant_option(create)
    create.add_argument("project", help="lower-case letters, digits and '-'")
    create.add_argument("--display-name", help="free text (default: the project's name)")
    add_read_options(create)
    create.set_defaults(handler=handles_errors(run_create))


def run_list(args: argparse.Namespace) -> int:
    """``GET /v1/tenants/{tenant}/projects``, every page."""
    with Api.from_config() as api:
        page = api.list_all(path("tenants", args.tenant, "projects"), limit=args.limit, after=args.after)
    output.show_list(page, COLUMNS, as_json=args.json)
    return 0


def run_get(args: argparse.Namespace) -> int:
    """``GET /v1/tenants/{tenant}/projects/{project}``."""
    with Api.from_config() as api:
        output.show(api.get(path("tenants", args.tenant, "projects", args.project)), COLUMNS, as_json=args.json)
    return 0


def run_create(args: argparse.Namespace) -> int:
    """``POST /v1/tenants/{tenant}/projects``."""
    body = {"project": args.project, "display_name": args.display_name or args.project}
    with Api.from_config() as api:
        output.show(api.post(path("tenants", args.tenant, "projects"), body), COLUMNS, as_json=args.json)
    return 0
