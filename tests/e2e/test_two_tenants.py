"""Issue 3's "done when", as a new user does it: `tessera up`, bootstrap, two tenants through the CLI.

Everything here is a real process: the embedded NATS and Postgres, the tenancy service, the
gateway, and each `tessera` command. Neither tenant may see or touch the other's anything.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cli:
    def __init__(self, home: Path, config: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL", "TESSERA_URL")}
        self.env |= {"TESSERA_HOME": str(home), "TESSERA_CONFIG": str(config)}

    def __call__(self, *args: str, key: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if key is not None:
            env["TESSERA_API_KEY"] = key
        result = subprocess.run(
            [sys.executable, "-m", "tessera_cli.main", *args], capture_output=True, text=True, env=env, timeout=120
        )
        if check:
            assert result.returncode == 0, f"tessera {' '.join(args)}: {result.stderr}"
        return result

    def json(self, *args: str, key: str | None = None) -> object:
        return json.loads(self(*args, "--json", key=key).stdout)


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    root = tmp_path_factory.mktemp("e2e")
    run = Cli(root / "home", root / "config.json")
    port = free_port()
    run("up", "--detach", "--port", str(port))
    run.env["TESSERA_URL"] = f"http://127.0.0.1:{port}"
    try:
        yield run
    finally:
        run("down", check=False)


def test_two_tenants_through_the_cli_and_neither_sees_the_other(cli: Cli) -> None:
    status = cli("status", "--json")
    assert json.loads(status.stdout)["healthy"] is True, status.stdout

    boot = cli.json("admin", "bootstrap", "--name", "root")
    admin = boot["secret"]  # type: ignore[index]
    assert cli("admin", "bootstrap", check=False).returncode == 5  # once only

    keys = {}
    for tenant in ("acme", "globex"):
        cli("tenants", "create", tenant, "--display-name", f"{tenant.title()} Corp", key=admin)
        cli("projects", "create", "-t", tenant, "vision", key=admin)
        cli("quotas", "set", "-t", tenant, "--cohort", "research", "--gpu", "H100=8:4:2", "--budget", "1000", key=admin)
        cli("quotas", "set", "-t", tenant, "-p", "vision", "--gpu", "H100=4", "--max-jobs", "10", key=admin)
        cli("users", "create", "-t", tenant, "boss", "--role", "tenant-admin", key=admin)
        issued = cli.json("keys", "create", "-t", tenant, "-u", "boss", "--name", "laptop", key=admin)
        keys[tenant] = issued["secret"]  # type: ignore[index]
        # The tenant admin runs its own tenant from here on.
        cli("users", "create", "-t", tenant, "ada", "--role", "member", "--project", "vision", key=keys[tenant])

    acme, globex = keys["acme"], keys["globex"]
    assert [t["tenant"] for t in cli.json("tenants", "list", key=acme)["items"]] == ["acme"]  # type: ignore[index]
    users = cli.json("users", "list", "-t", "acme", key=acme)["items"]  # type: ignore[index]
    assert sorted(u["name"] for u in users) == ["ada", "boss"]

    # Acme's admin cannot see or touch anything of globex: every attempt is "not found" (exit 4).
    attempts = [
        ("tenants", "get", "globex"),
        ("projects", "list", "-t", "globex"),
        ("projects", "get", "-t", "globex", "vision"),
        ("projects", "create", "-t", "globex", "stolen"),
        ("users", "list", "-t", "globex"),
        ("users", "create", "-t", "globex", "mole", "--role", "tenant-admin"),
        ("quotas", "get", "-t", "globex"),
        ("quotas", "list", "-t", "globex"),
        ("quotas", "set", "-t", "globex", "-p", "vision", "--gpu", "H100=1", "--replace"),
    ]
    for args in attempts:
        result = cli(*args, key=acme, check=False)
        assert result.returncode == 4, f"{args}: {result.returncode} {result.stderr}"
        assert "Globex Corp" not in result.stdout + result.stderr
    # ...and the same the other way round.
    assert cli("tenants", "get", "acme", key=globex, check=False).returncode == 4
    # Globex is untouched.
    projects = cli.json("projects", "list", "-t", "globex", key=globex)["items"]  # type: ignore[index]
    assert [p["project"] for p in projects] == ["vision"]
    # A tenant admin cannot lift its own tenant's quota (platform only): 403 -> exit 3.
    assert cli("quotas", "set", "-t", "acme", "--gpu", "H100=800", key=acme, check=False).returncode == 3

    # Revoking a key locks it out at once.
    key_id = cli.json("keys", "list", "-t", "acme", "-u", "boss", key=admin)["items"][0]["key_id"]  # type: ignore[index]
    cli("keys", "revoke", "-t", "acme", key_id, key=admin)
    assert cli("me", key=acme, check=False).returncode == 3
