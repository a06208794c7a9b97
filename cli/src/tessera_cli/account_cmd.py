"""``tessera login``, ``tessera config show`` and ``tessera me``: who the CLI talks to, and as whom."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from tessera_cli import output
from tessera_cli.client import (
    DEFAULT_URL,
    Api,
    CliFailure,
    UsageError,
    add_read_options,
    handles_errors,
    load_config,
    mask,
    save_config,
)

ME_COLUMNS: list[output.Column] = [
    ("name", "name"),
    ("id", "id"),
    ("kind", "kind"),
    ("tenant", "tenant"),
    ("roles", lambda p: output.roles(p.get("roles"), with_tenant=True)),
    ("key", "key_id"),
]


def register(sub: Any) -> None:
    """Add ``login``, ``config`` and ``me``."""
    login = sub.add_parser("login", help="check an API key against the gateway and save url and key")
    login.add_argument("--url", help=f"the gateway (default: $TESSERA_URL, the saved url, else {DEFAULT_URL})")
    login.add_argument("--key", help="the API key (default: read from stdin, or prompted for)")
    login.set_defaults(handler=handles_errors(run_login))

    config = sub.add_parser("config", help="the saved gateway address and key")
    csub = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = csub.add_parser("show", help="print the gateway url and the key's first 8 characters")
    add_read_options(show)
    show.set_defaults(handler=handles_errors(run_config_show))

    me = sub.add_parser("me", help="who the configured key belongs to")
    add_read_options(me)
    me.set_defaults(handler=handles_errors(run_me))


def _read_key() -> str:
    if sys.stdin.isatty():
        return getpass.getpass("API key: ").strip()
    return sys.stdin.readline().strip()


def run_login(args: argparse.Namespace) -> int:
    """Call ``GET /v1/me`` with the key; on success write the config file (mode 0600)."""
    config = load_config()
    url = (args.url or config.url).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--url {url!r}: expected an http:// or https:// address")
    key = args.key if args.key is not None else _read_key()
    if not key:
        raise UsageError("no API key given (--key, or one line on stdin)")
    with Api(url, key) as api:
        me = api.get("/v1/me")
    save_config(config.path, url, key)
    who = me.get("name", "?") if isinstance(me, dict) else "?"
    tenant = me.get("tenant", "?") if isinstance(me, dict) else "?"
    print(f"logged in to {url} as {who} (tenant {tenant}); saved to {config.path}")
    return 0


def run_config_show(args: argparse.Namespace) -> int:
    """Print the effective url and key (masked) and where each comes from."""
    config = load_config()
    sources = {"env": "environment", "file": str(config.path), "default": "default", "none": "not set"}
    data = {
        "url": config.url,
        "url_source": config.url_source,
        "api_key": mask(config.api_key),
        "api_key_source": config.key_source,
        "config_file": str(config.path),
    }
    if args.json:
        output.print_json(data)
        return 0
    output.print_record(
        data,
        [
            ("url", lambda d: f"{d['url']}  ({sources[d['url_source']]})"),
            ("api key", lambda d: f"{d['api_key']}  ({sources[d['api_key_source']]})"),
            ("config file", "config_file"),
        ],
    )
    return 0


def run_me(args: argparse.Namespace) -> int:
    """``GET /v1/me``: the caller's identity and roles."""
    with Api.from_config() as api:
        me = api.get("/v1/me")
    if me is None:
        raise CliFailure("the gateway answered GET /v1/me with an empty body")
    output.show(me, ME_COLUMNS, as_json=args.json)
    return 0
