"""``tessera``: the command line of the Tessera control plane.

Every command exits 0 on success; on bad input or an unreachable server it prints one plain
line, ``tessera: error: <what>``, to stderr and exits non-zero: 2 for usage, and for the gateway
client the codes of :data:`tessera_cli.client.EXIT_CODES_EPILOG` (3 auth, 4 not found,
5 conflict, 6 unavailable), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from tessera_cli import (
    account_cmd,
    admin_cmd,
    bench_cmd,
    client,
    clusters_cmd,
    contracts_cmd,
    dev_cmd,
    infra_cmd,
    jobs_cmd,
    keys_cmd,
    nodes_cmd,
    priority_cmd,
    projections_cmd,
    projects_cmd,
    quotas_cmd,
    replay_cmd,
    simulate_cmd,
    tenants_cmd,
    up_cmd,
    users_cmd,
)
from tessera_runtime import logs


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one plain line (and exit status 2, argparse's usage code).

    argparse prints the whole usage block before its error; a script that reads stderr then gets
    several lines for one mistake. Sub-command parsers inherit the class.
    """

    def error(self, message: str) -> NoReturn:
        """Print ``tessera: error: <message> (see <prog> --help)`` and exit 2."""
        self.exit(2, f"tessera: error: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    parser = OneLineParser(
        prog="tessera",
        description="Tessera, a control plane for shared GPU clusters.",
        epilog=client.EXIT_CODES_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        dev_cmd,
        contracts_cmd,
        projections_cmd,
        replay_cmd,
        bench_cmd,
        up_cmd,
        account_cmd,
        admin_cmd,
        tenants_cmd,
        projects_cmd,
        users_cmd,
        keys_cmd,
        quotas_cmd,
        clusters_cmd,
        priority_cmd,
        jobs_cmd,
        nodes_cmd,
        infra_cmd,
        simulate_cmd,
    ):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tessera`` script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.command, getattr(args, "action", None)) != ("projections", "run"):  # a service logs its own way
        logs.configure_on_first_use("tessera-cli", level="ERROR")
    try:
        result = args.handler(args)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except KeyboardInterrupt:
        print("tessera: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``tessera ... | head``): nothing more to say, and nothing to flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except client.CliFailure as exc:
        print(f"tessera: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"tessera: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
