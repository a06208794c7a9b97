"""``tessera infra nats-auth``: generate NATS users for the services and for tenants' subscribers."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import msgspec

from tessera_cli import natsauth


def register(sub: Any) -> None:
    """Add the ``infra`` command."""
    p = sub.add_parser("infra", help="configuration for real deployments")
    isub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = isub.add_parser(
        "nats-auth",
        help="NATS users: one with full access for the services, one per tenant limited to its subjects",
    )
    a.add_argument("--service-user", default="tessera", help="the services' user (full access; default tessera)")
    a.add_argument("--tenant", action="append", default=[], help="a tenant to make a subscriber for (repeatable)")
    a.add_argument("--out", type=Path, required=True, help="folder for auth.conf and credentials.json")
    a.set_defaults(handler=run_nats_auth)


def run_nats_auth(args: argparse.Namespace) -> int:
    """Write ``auth.conf`` (include it in nats-server's config) and ``credentials.json`` (mode 0600)."""
    creds = [natsauth.new_credential(args.service_user, None)]
    creds += [natsauth.new_credential(f"tenant-{t}", t) for t in args.tenant]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "auth.conf").write_text(natsauth.authorization_block(creds))
    secret_path = args.out / "credentials.json"
    fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(msgspec.to_builtins(creds), f, indent=2)
    print(f"wrote {args.out / 'auth.conf'} (include it in the nats-server configuration)")
    print(f"wrote {secret_path} (mode 0600: the plain passwords, give each to its client)")
    for c in creds:
        scope = "all subjects" if c.tenant is None else ", ".join(natsauth.tenant_subjects(c.tenant))
        print(f"  {c.user}: subscribe {scope}")
    return 0
