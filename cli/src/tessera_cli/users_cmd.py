"""``tessera users list|get|create|grant|revoke`` (within one tenant, ``-t``)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from tessera_cli import output
from tessera_cli.client import (
    Api,
    ApiError,
    add_list_options,
    add_read_options,
    add_tenant_option,
    handles_errors,
    path,
)
from tessera_contracts.rbac import ROLES

COLUMNS: list[output.Column] = [
    ("NAME", "name"),
    ("ID", "id"),
    ("KIND", "kind"),
    ("ROLES", lambda u: output.roles(u.get("roles"))),
    ("CREATED", "created_at"),
]

USER_ID = re.compile(r"^u_[0-9a-f]{1,32}$")
"""The gateway's user ids; anything else given as a user is looked up by name."""


def user_id(api: Api, tenant: str, user: str) -> str:
    """The id of ``user``, given as an id (``u_<hex>``) or a name.

    A name is first compared with the caller's own (``GET /v1/me``), which anyone may read, so a
    member or viewer can name themselves; any other name is looked up in the tenant's users
    (which needs a role that may list them, e.g. tenant admin).

    Raises:
        ApiError: no user of that name in the tenant (exit status 4), or the caller may not list
            the tenant's users (exit status 3).
    """
    if USER_ID.match(user):
        return user
    me = api.get(path("me"))
    if isinstance(me, dict) and me.get("name") == user and me.get("tenant") == tenant and me.get("id"):
        return str(me["id"])
    for page in api.pages(path("tenants", tenant, "users")):
        for item in page["items"]:
            if isinstance(item, dict) and item.get("name") == user and item.get("id"):
                return str(item["id"])
    raise ApiError(404, f"user {user} not found in tenant {tenant}", "not-found")


def register(sub: Any) -> None:
    """Add ``users``."""
    p = sub.add_parser("users", help="users and service accounts of a tenant, and their roles")
    usub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = usub.add_parser("list", help="the tenant's users and service accounts")
    add_tenant_option(ls)
    add_list_options(ls)
    ls.set_defaults(handler=handles_errors(run_list))

    get = usub.add_parser("get", help="one user")
    add_tenant_option(get)
    get.add_argument("user", help="the user's id or name")
    add_read_options(get)
    get.set_defaults(handler=handles_errors(run_get))

    create = usub.add_parser("create", help="create a user or service account (tenant admins)")
    add_tenant_option(create)
    create.add_argument("name", help="a handle or e-mail address")
    create.add_argument("--service-account", action="store_true", help="a service account, not a person")
    create.add_argument("--role", choices=ROLES, help="a first role to grant")
    create.add_argument("--project", help="narrow --role to this project")
    add_read_options(create)
    create.set_defaults(handler=handles_errors(run_create))

    for action, handler, text in (("grant", run_grant, "grant a role"), ("revoke", run_revoke, "revoke a role")):
        q = usub.add_parser(action, help=f"{text} (tenant admins)")
        add_tenant_option(q)
        q.add_argument("user", help="the user's id or name")
        q.add_argument("role", choices=ROLES)
        q.add_argument("--project", help="the project the role is narrowed to")
        add_read_options(q)
        q.set_defaults(handler=handles_errors(handler))


def run_list(args: argparse.Namespace) -> int:
    """``GET /v1/tenants/{tenant}/users``, every page."""
    with Api.from_config() as api:
        page = api.list_all(path("tenants", args.tenant, "users"), limit=args.limit, after=args.after)
    output.show_list(page, COLUMNS, as_json=args.json)
    return 0


def run_get(args: argparse.Namespace) -> int:
    """``GET /v1/tenants/{tenant}/users/{user}``."""
    with Api.from_config() as api:
        uid = user_id(api, args.tenant, args.user)
        output.show(api.get(path("tenants", args.tenant, "users", uid)), COLUMNS, as_json=args.json)
    return 0


def run_create(args: argparse.Namespace) -> int:
    """``POST /v1/tenants/{tenant}/users``."""
    body: dict[str, Any] = {"name": args.name, "kind": "service_account" if args.service_account else "user"}
    if args.role:
        body["role"] = args.role
    if args.project:
        body["project"] = args.project
    with Api.from_config() as api:
        output.show(api.post(path("tenants", args.tenant, "users"), body), COLUMNS, as_json=args.json)
    return 0


def _role_change(args: argparse.Namespace, suffix: tuple[str, ...], verb: str) -> int:
    body: dict[str, Any] = {"role": args.role}
    if args.project:
        body["project"] = args.project
    with Api.from_config() as api:
        uid = user_id(api, args.tenant, args.user)
        result = api.post(path("tenants", args.tenant, "users", uid, "roles", *suffix), body)
    if result is None and not args.json:
        where = f" on project {args.project}" if args.project else ""
        print(f"{verb} {args.role}{where} for {args.user}")
    else:
        output.show(result, COLUMNS, as_json=args.json)
    return 0


def run_grant(args: argparse.Namespace) -> int:
    """``POST /v1/tenants/{tenant}/users/{user}/roles``."""
    return _role_change(args, (), "granted")


def run_revoke(args: argparse.Namespace) -> int:
    """``POST /v1/tenants/{tenant}/users/{user}/roles/revoke``."""
    return _role_change(args, ("revoke",), "revoked")
