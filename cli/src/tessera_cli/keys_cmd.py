"""``tessera keys list|create|revoke``: API keys. A new key's secret is printed once, never again."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from tessera_cli import output
from tessera_cli.client import (
    Api,
    UsageError,
    add_list_options,
    add_read_options,
    add_tenant_option,
    handles_errors,
    path,
)
from tessera_cli.users_cmd import user_id

COLUMNS: list[output.Column] = [
    ("KEY", "key_id"),
    ("NAME", "name"),
    ("USER", "user_id"),
    ("PREFIX", "prefix"),
    ("CREATED", "created_at"),
    ("EXPIRES", "expires_at"),
    ("REVOKED", "revoked_at"),
    ("LAST USED", "last_used_at"),
]


def register(sub: Any) -> None:
    """Add ``keys``."""
    p = sub.add_parser("keys", help="API keys")
    ksub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = ksub.add_parser("list", help="a user's keys (never their secrets)")
    add_tenant_option(ls)
    ls.add_argument("-u", "--user", required=True, help="the user's id or name")
    add_list_options(ls)
    ls.set_defaults(handler=handles_errors(run_list))

    create = ksub.add_parser("create", help="issue a key; its secret is printed this once")
    add_tenant_option(create)
    create.add_argument("-u", "--user", required=True, help="the user's id or name")
    create.add_argument("--name", required=True, help="what the key is for")
    create.add_argument("--expires-at", metavar="ISO", help="expiry, ISO 8601 (no zone: UTC); default never")
    add_read_options(create)
    create.set_defaults(handler=handles_errors(run_create))

    revoke = ksub.add_parser("revoke", help="revoke a key")
    add_tenant_option(revoke)
    revoke.add_argument("key", help="the key's id")
    add_read_options(revoke)
    revoke.set_defaults(handler=handles_errors(run_revoke))


def parse_expiry(text: str) -> str:
    """An ISO 8601 date or time as an RFC 3339 timestamp (UTC when no zone is given).

    Raises:
        UsageError: not an ISO 8601 date or time.
    """
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--expires-at {text!r}: expected an ISO 8601 time, e.g. 2030-01-31T00:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.isoformat()


def run_list(args: argparse.Namespace) -> int:
    """``GET /v1/tenants/{tenant}/users/{user}/keys``, every page."""
    with Api.from_config() as api:
        url = path("tenants", args.tenant, "users", user_id(api, args.tenant, args.user), "keys")
        page = api.list_all(url, limit=args.limit, after=args.after)
    output.show_list(page, COLUMNS, as_json=args.json)
    return 0


def run_create(args: argparse.Namespace) -> int:
    """``POST /v1/tenants/{tenant}/users/{user}/keys``; prints the secret once."""
    body: dict[str, Any] = {"name": args.name}
    if args.expires_at:
        body["expires_at"] = parse_expiry(args.expires_at)
    with Api.from_config() as api:
        uid = user_id(api, args.tenant, args.user)
        issued = api.post(path("tenants", args.tenant, "users", uid, "keys"), body)
    if args.json:
        output.print_json(issued)
        return 0
    print_issued(issued)
    return 0


def print_issued(issued: Any) -> None:
    """Print a newly issued key (``IssuedKey``): its id, then the secret on its own line, with a warning."""
    key = issued.get("key", {}) if isinstance(issued, dict) else {}
    secret = issued.get("secret") if isinstance(issued, dict) else None
    output.print_record(key, [*COLUMNS[:4], ("EXPIRES", "expires_at")])
    print(f"secret  {secret}")
    print("Store the secret now: it is shown this once and cannot be shown again.", file=sys.stderr)


def run_revoke(args: argparse.Namespace) -> int:
    """``DELETE /v1/tenants/{tenant}/keys/{key}``."""
    with Api.from_config() as api:
        result = api.delete(path("tenants", args.tenant, "keys", args.key))
    if result is None and not args.json:
        print(f"revoked key {args.key}")
    else:
        output.show(result, COLUMNS, as_json=args.json)
    return 0
