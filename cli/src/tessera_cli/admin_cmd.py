"""``tessera admin bootstrap``: the first platform admin and its key, straight over NATS.

No key exists yet, so this does not go through the gateway: it sends the tenancy service's
``bootstrap`` request (``rpc.tenancy.bootstrap``) on the NATS of ``--nats-url``, ``$NATS_URL`` or
the running embedded stack. The service refuses (409, exit status 5) once a platform admin exists.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

import msgspec
import nats
import nats.errors

from tessera_cli.client import CONFLICT, UNAVAILABLE, CliFailure, exit_code_for_status, handles_errors
from tessera_runtime.config import Settings
from tessera_runtime.devstack import StackError

if TYPE_CHECKING:
    from tessera_contracts.api.tenancy import IssuedKey


def register(sub: Any) -> None:
    """Add ``admin``."""
    p = sub.add_parser("admin", help="platform administration that does not go through the gateway")
    asub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    boot = asub.add_parser("bootstrap", help="create the first platform admin and print its key once")
    boot.add_argument("--name", default="admin", help="the admin's user name (default: admin)")
    boot.add_argument("--nats-url", help="NATS (default: $NATS_URL, else the embedded stack)")
    boot.add_argument("--json", action="store_true", help="print the reply (with the secret) as JSON")
    boot.set_defaults(handler=handles_errors(run_bootstrap))


def _nats_url(args: argparse.Namespace) -> str:
    if args.nats_url:
        return str(args.nats_url)
    if os.environ.get("NATS_URL"):
        return os.environ["NATS_URL"]
    try:
        return Settings.from_env().nats_url
    except StackError as exc:
        raise CliFailure(f"{exc} (unavailable)", UNAVAILABLE) from None


async def bootstrap(nats_url: str, name: str) -> IssuedKey:
    """Ask the tenancy service for the first platform admin; returns the issued key.

    Raises:
        CliFailure: NATS unreachable, no tenancy service, or the service's problem (409 when an
            admin exists), with the matching exit status.
    """
    from tessera_contracts.api.tenancy import Bootstrap, IssuedKey  # imported when used: keeps `tessera` fast
    from tessera_runtime import rpc

    try:
        nc = await nats.connect(nats_url, name="tessera-cli", connect_timeout=5, allow_reconnect=False)
    except (OSError, nats.errors.Error) as exc:
        reason = str(exc) or type(exc).__name__
        raise CliFailure(f"cannot reach NATS at {nats_url}: {reason} (unavailable)", UNAVAILABLE) from None
    try:
        raw = await rpc.call(nc, "tenancy", "bootstrap", Bootstrap(name=name), timeout_s=10)
    except rpc.RpcError as exc:
        problem = exc.problem
        detail = problem.detail or problem.title
        if problem.status == 409:
            detail = detail or "a platform admin already exists"
            raise CliFailure(f"{detail} ({problem.code})", CONFLICT) from None
        raise CliFailure(f"{detail} ({problem.code})", exit_code_for_status(problem.status)) from None
    finally:
        await nc.close()
    return msgspec.json.decode(raw, type=IssuedKey)


async def run_bootstrap(args: argparse.Namespace) -> int:
    """Create the first platform admin; print its key once."""
    issued = await bootstrap(_nats_url(args), args.name)
    if args.json:
        print(msgspec.json.format(msgspec.json.encode(issued), indent=2).decode())
        return 0
    print(f"platform admin  {args.name}  (user {issued.key.user_id}, tenant {issued.key.tenant})")
    print(f"key id          {issued.key.key_id}")
    print(f"secret          {issued.secret}")
    print(
        "Store the secret now: it is shown this once. Then: tessera login --url <gateway url> --key <secret>",
        file=sys.stderr,
    )
    return 0
