"""The CLI as a gateway client, end to end: a real ``tessera`` process against a small fake gateway.

The fake gateway (``http.server`` on a free loopback port, in a thread of the test process)
answers a few routes with canned JSON and problem+json errors, and records every request, so the
tests can check what the CLI sent: the key, the ``Idempotency-Key``, the cursors it followed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from nats.aio.client import Client as NATS

from tessera_cli import quotas_cmd
from tessera_cli.client import UsageError
from tessera_cli.main import main
from tessera_runtime import logs

GOOD_KEY = "tsk_live_0123456789abcdef"
ADA_KEY = "tsk_ada_0123456789abcdef"  # a member of acme: may not list the tenant's users
ADA_ME = {
    "id": "u_7",
    "tenant": "acme",
    "name": "ada@example.com",
    "kind": "user",
    "roles": [{"role": "member", "tenant": "acme", "project": None}],
    "key_id": "k_a",
}
TENANTS = [{"tenant": f"t{i}", "display_name": f"Tenant {i}", "created_at": "2025-01-01T00:00:00Z"} for i in range(5)]
ME = {
    "id": "u-1",
    "tenant": "_system",
    "name": "admin",
    "kind": "user",
    "roles": [{"role": "platform-admin", "tenant": "_system", "project": None}],
    "key_id": "k-1",
}
QUOTA = {
    "tenant": "acme",
    "project": None,
    "cohort": "pool-a",
    "gpus": [{"gpu_model": "A100", "nominal_milli": 4000, "borrowing_limit_milli": None, "lending_limit_milli": 1000}],
    "monthly_gpu_hour_budget": "50",
    "max_concurrent_jobs": None,
    "fair_share_weight": 2,
    "updated_at": "2025-01-01T00:00:00Z",
}


@dataclass
class Seen:
    """One request the fake gateway received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeGateway:
    """Routes, canned answers and the log of requests."""

    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    flaky_failures: int = 1
    in_progress: int = 0  # answers "still in progress" (409 + Retry-After) to this many POSTs of "slowpoke"

    def answer(self, req: Seen) -> tuple[int, Any, dict[str, str]]:
        route = (req.method, req.path)
        if req.headers.get("authorization") == f"Bearer {ADA_KEY}":
            return self.answer_ada(req, route)
        if req.headers.get("authorization") != f"Bearer {GOOD_KEY}":
            return problem(401, "unauthenticated", "the API key is not valid")
        if route == ("POST", "/v1/tenants") and req.body["tenant"] == "slowpoke" and self.in_progress > 0:
            self.in_progress -= 1
            return problem(
                409, "conflict", "a request with this Idempotency-Key is still in progress", {"Retry-After": "0"}
            )
        if route == ("GET", "/v1/me"):
            return 200, ME, {}
        if route == ("GET", "/v1/tenants"):
            # pages of at most 2, whatever the client asks: the client must follow `next`
            start = int(req.query.get("after", ["0"])[0])
            size = min(2, int(req.query.get("limit", ["50"])[0]))
            end = start + size
            return 200, {"items": TENANTS[start:end], "next": str(end) if end < len(TENANTS) else None}, {}
        if route == ("GET", "/v1/tenants/t1"):
            return 200, TENANTS[1], {}
        if route == ("GET", "/v1/tenants/down"):
            return problem(503, "unavailable", "tenancy did not answer", {"Retry-After": "0"})
        if req.method == "GET" and req.path.startswith("/v1/tenants/") and req.path.count("/") == 3:
            return problem(404, "not-found", f"tenant {req.path.rsplit('/', 1)[1]} not found")
        if route == ("POST", "/v1/tenants"):
            if req.body["tenant"] == "dup":
                return problem(409, "conflict", "tenant dup exists")
            if req.body["tenant"] == "flaky" and self.flaky_failures > 0:
                self.flaky_failures -= 1
                return problem(503, "unavailable", "try again", {"Retry-After": "0"})
            return 201, {**req.body, "created_at": "2025-01-01T00:00:00Z"}, {}
        if route == ("POST", "/v1/clusters"):
            return problem(403, "forbidden", "only platform admins register clusters")
        if route == ("GET", "/v1/tenants/acme/quota"):
            return 200, QUOTA, {}
        if route == ("PUT", "/v1/tenants/acme/quota"):
            return 200, {**QUOTA, **req.body}, {}
        if route == ("GET", "/v1/tenants/acme/users"):
            ada = {"tenant": "acme", "id": "u_7", "name": "ada@example.com", "kind": "user", "roles": []}
            return 200, {"items": [ada], "next": None}, {}
        if route == ("POST", "/v1/tenants/acme/users/u_7/keys"):
            key = {"tenant": "acme", "key_id": "k-9", "user_id": "u-7", "name": req.body["name"], "prefix": "tsk_9"}
            return 201, {"key": key, "secret": "tsk_9_s3cr3t"}, {}
        if route == ("DELETE", "/v1/tenants/acme/keys/k-9"):
            return 204, None, {}
        return problem(404, "not-found", f"no route {req.method} {req.path}")

    def answer_ada(self, req: Seen, route: tuple[str, str]) -> tuple[int, Any, dict[str, str]]:
        """A member: herself, her own keys; listing the tenant's users is forbidden."""
        if route == ("GET", "/v1/me"):
            return 200, ADA_ME, {}
        if route == ("GET", "/v1/tenants/acme/users/u_7/keys"):
            key = {"tenant": "acme", "key_id": "k_a", "user_id": "u_7", "name": "laptop", "prefix": "tsk_ada"}
            return 200, {"items": [key], "next": None}, {}
        if route == ("POST", "/v1/tenants/acme/users/u_7/keys"):
            key = {"tenant": "acme", "key_id": "k_b", "user_id": "u_7", "name": req.body["name"], "prefix": "tsk_b"}
            return 201, {"key": key, "secret": "tsk_b_s3cr3t"}, {}
        if req.method == "GET" and req.path.startswith("/v1/tenants/acme/users"):
            return problem(403, "forbidden", "not allowed on users of tenant 'acme'")
        return problem(404, "not-found", f"no route {req.method} {req.path}")


def problem(
    status: int, code: str, detail: str, headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    body = {"type": f"https://tessera.dev/problems/{code}", "title": code, "status": status, "code": code}
    return status, {**body, "detail": detail}, {"Content-Type": "application/problem+json", **(headers or {})}


@pytest.fixture
def gateway() -> Iterator[FakeGateway]:
    fake = FakeGateway()

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            req = Seen(
                self.command,
                parts.path,
                parse_qs(parts.query),
                {k.lower(): v for k, v in self.headers.items()},
                json.loads(raw) if raw else None,
            )
            fake.seen.append(req)
            status, body, headers = fake.answer(req)
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            headers.setdefault("Content-Type", "application/json")
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _handle

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


def tessera(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_") and k not in ("NATS_URL",)}
    return subprocess.run(
        [sys.executable, "-m", "tessera_cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
        input=stdin,
    )


@dataclass
class Result:
    """What an in-process run of the CLI printed and returned."""

    returncode: int
    stdout: str
    stderr: str


Cli = Callable[..., Result]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """``tessera`` run in this process (``main(argv)``): the same code path, without a second's start-up."""
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)  # leave the test process's logging alone

    def run(*args: str, env: dict[str, str]) -> Result:
        with monkeypatch.context() as patch:
            for name in [n for n in os.environ if n.startswith("TESSERA_") or n == "NATS_URL"]:
                patch.delenv(name)
            for name, value in env.items():
                patch.setenv(name, value)
            capsys.readouterr()
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse
                code = int(exc.code or 0)
            out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return tmp_path / "cfg" / "config.json"


@pytest.fixture
def logged_in(gateway: FakeGateway, config: Path) -> dict[str, str]:
    """Env of a CLI with a saved config for the fake gateway."""
    config.parent.mkdir()
    config.write_text(json.dumps({"url": gateway.url, "api_key": GOOD_KEY}))
    return {"TESSERA_CONFIG": str(config)}


def one_error_line(result: subprocess.CompletedProcess[str] | Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tessera: error: ")
    return lines[0]


def test_login_writes_a_private_config_and_config_show_masks_the_key(
    cli: Cli, gateway: FakeGateway, config: Path
) -> None:
    env = {"TESSERA_CONFIG": str(config)}
    bad = cli("login", "--url", gateway.url, "--key", "tsk_wrong", env=env)
    assert bad.returncode == 3
    assert one_error_line(bad) == "tessera: error: the API key is not valid (unauthenticated)"
    assert not config.exists(), "a key the gateway refuses is not saved"

    ok = tessera("login", "--url", gateway.url + "/", env=env, stdin=GOOD_KEY + "\n")  # key read from stdin
    assert ok.returncode == 0, ok.stderr
    assert "as admin" in ok.stdout
    assert gateway.seen[-1].path == "/v1/me"
    assert gateway.seen[-1].headers["authorization"] == f"Bearer {GOOD_KEY}"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text()) == {"url": gateway.url, "api_key": GOOD_KEY}

    show = cli("config", "show", env=env)
    assert show.returncode == 0, show.stderr
    assert GOOD_KEY[:8] in show.stdout and GOOD_KEY[8:] not in show.stdout
    assert gateway.url in show.stdout
    shown = json.loads(cli("config", "show", "--json", env=env).stdout)
    assert shown["api_key"] == GOOD_KEY[:8] + "…" and shown["url_source"] == "file"


def test_environment_overrides_the_config_file(cli: Cli, gateway: FakeGateway, config: Path) -> None:
    config.parent.mkdir()
    config.write_text(json.dumps({"url": "http://127.0.0.1:9", "api_key": "tsk_from_the_file"}))
    env = {"TESSERA_CONFIG": str(config), "TESSERA_URL": gateway.url, "TESSERA_API_KEY": GOOD_KEY}
    me = cli("me", env=env)
    assert me.returncode == 0, me.stderr
    assert "platform-admin@_system" in me.stdout
    assert gateway.seen[-1].headers["authorization"] == f"Bearer {GOOD_KEY}"
    # Each variable on its own: the key from the environment, the url still from the file.
    config.write_text(json.dumps({"url": gateway.url, "api_key": "tsk_from_the_file"}))
    assert cli("me", env={"TESSERA_CONFIG": str(config), "TESSERA_API_KEY": GOOD_KEY}).returncode == 0
    assert cli("me", env={"TESSERA_CONFIG": str(config)}).returncode == 3


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (("tenants", "get", "nosuch"), 4, "tenant nosuch not found (not-found)"),
        (("tenants", "create", "dup"), 5, "tenant dup exists (conflict)"),
        (("clusters", "create", "c1", "--region", "r", "--provider", "aws"), 3, "only platform admins"),
        (("tenants", "get", "down"), 6, "tenancy did not answer (unavailable)"),
    ],
)
def test_exit_codes_follow_the_problem_status(
    cli: Cli, gateway: FakeGateway, logged_in: dict[str, str], args: tuple[str, ...], code: int, line: str
) -> None:
    result = cli(*args, env=logged_in)
    assert result.returncode == code, result.stderr
    assert line in one_error_line(result)
    if args[-1] == "down":
        assert len(gateway.seen) == 4, "a 503 is retried 3 times"


def test_unauthenticated_unreachable_and_unconfigured(gateway: FakeGateway, config: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    # Independent runs side by side: each `tessera` process pays about a second of start-up.
    with ThreadPoolExecutor() as pool:
        wrong_key_f = pool.submit(tessera, "me", env={"TESSERA_URL": gateway.url, "TESSERA_API_KEY": "nope"})
        refused_f = pool.submit(tessera, "tenants", "list", env={"TESSERA_URL": closed, "TESSERA_API_KEY": GOOD_KEY})
        nothing_f = pool.submit(tessera, "tenants", "list", env={"TESSERA_CONFIG": str(config)})
    wrong_key, refused, nothing = wrong_key_f.result(), refused_f.result(), nothing_f.result()
    assert wrong_key.returncode == 3 and "(unauthenticated)" in one_error_line(wrong_key)
    assert refused.returncode == 6
    expected = f"tessera: error: cannot reach the gateway at {closed}: connection refused (unavailable)"
    assert one_error_line(refused) == expected
    assert nothing.returncode == 3 and "tessera login" in one_error_line(nothing)


def test_lists_follow_next_to_the_end_unless_limited(cli: Cli, gateway: FakeGateway, logged_in: dict[str, str]) -> None:
    everything = cli("tenants", "list", "--json", env=logged_in)
    assert everything.returncode == 0, everything.stderr
    assert json.loads(everything.stdout) == {"items": TENANTS, "next": None}
    cursors = [req.query.get("after") for req in gateway.seen]
    assert cursors == [None, ["2"], ["4"]]

    table = cli("tenants", "list", env=logged_in).stdout.splitlines()
    assert table[0].split() == ["TENANT", "DISPLAY", "NAME", "CREATED"]
    assert [row.split()[0] for row in table[1:]] == ["t0", "t1", "t2", "t3", "t4"]

    gateway.seen.clear()
    limited = json.loads(cli("tenants", "list", "--limit", "3", "--json", env=logged_in).stdout)
    assert [t["tenant"] for t in limited["items"]] == ["t0", "t1", "t2"]
    assert limited["next"] == "3", "the cursor to continue from"
    assert [req.query["limit"] for req in gateway.seen] == [["3"], ["1"]]


def test_json_prints_what_the_gateway_sent(cli: Cli, gateway: FakeGateway, logged_in: dict[str, str]) -> None:
    assert json.loads(cli("tenants", "get", "t1", "--json", env=logged_in).stdout) == TENANTS[1]
    assert json.loads(cli("me", "--json", env=logged_in).stdout) == ME
    record = cli("tenants", "get", "t1", env=logged_in).stdout
    assert "Tenant 1" in record and "{" not in record


def test_writes_send_an_idempotency_key_reused_on_retry(
    cli: Cli, gateway: FakeGateway, logged_in: dict[str, str]
) -> None:
    created = cli("tenants", "create", "flaky", "--display-name", "Flaky Inc", env=logged_in)
    assert created.returncode == 0, created.stderr
    posts = [req for req in gateway.seen if req.method == "POST"]
    assert len(posts) == 2, "the 503 was retried"
    keys = {req.headers["idempotency-key"] for req in posts}
    assert len(keys) == 1, "the retry carries the same key"
    assert uuid.UUID(keys.pop()).version == 4
    assert posts[0].body == {"tenant": "flaky", "display_name": "Flaky Inc"}

    gateway.seen.clear()
    assert cli("tenants", "get", "t1", env=logged_in).returncode == 0
    assert cli("keys", "revoke", "-t", "acme", "k-9", env=logged_in).returncode == 0
    get, delete = gateway.seen
    assert "idempotency-key" not in get.headers
    assert uuid.UUID(delete.headers["idempotency-key"])


def test_key_create_prints_the_secret_once(cli: Cli, gateway: FakeGateway, logged_in: dict[str, str]) -> None:
    result = cli("keys", "create", "-t", "acme", "-u", "ada@example.com", "--name", "ci", env=logged_in)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("tsk_9_s3cr3t") == 1
    assert "shown this once" in result.stderr
    assert gateway.seen[-1].body == {"name": "ci"}
    assert gateway.seen[-2].path == "/v1/tenants/acme/users", "a user given by name is looked up"


def test_quota_set_changes_only_what_is_given(cli: Cli, gateway: FakeGateway, logged_in: dict[str, str]) -> None:
    args = ("quotas", "set", "-t", "acme", "--gpu", "H100=8:0.5", "--gpu", "A100=2::500m", "--budget", "100")
    result = cli(*args, "--json", env=logged_in)
    assert result.returncode == 0, result.stderr
    put = gateway.seen[-1]
    assert put.method == "PUT" and put.path == "/v1/tenants/acme/quota"
    assert put.body == {
        "cohort": "pool-a",
        "monthly_gpu_hour_budget": "100",
        "fair_share_weight": 2,
        "gpus": [
            {
                "gpu_model": "H100",
                "nominal_milli": 8000,
                "borrowing_limit_milli": 500,
                "lending_limit_milli": None,
            },
            {"gpu_model": "A100", "nominal_milli": 2000, "borrowing_limit_milli": None, "lending_limit_milli": 500},
        ],
    }
    replaced = cli("quotas", "set", "-t", "acme", "--max-jobs", "4", "--replace", env=logged_in)
    assert replaced.returncode == 0, replaced.stderr
    assert gateway.seen[-1].body == {"gpus": [], "max_concurrent_jobs": 4}
    shown = cli("quotas", "get", "-t", "acme", env=logged_in).stdout
    assert "A100=4::1" in shown, "GPU quotas print in the --gpu syntax"
    assert re.search(r"^weight +2$", shown, re.M), "the fair-share weight is shown"


def test_quota_set_weight(cli: Cli, gateway: FakeGateway, logged_in: dict[str, str]) -> None:
    result = cli("quotas", "set", "-t", "acme", "--weight", "5", env=logged_in)
    assert result.returncode == 0, result.stderr
    body = gateway.seen[-1].body
    assert body["fair_share_weight"] == 5 and body["cohort"] == "pool-a", "the rest of the quota is kept"
    assert re.search(r"^weight +5$", result.stdout, re.M)


@pytest.mark.parametrize(
    "args",
    [
        ("quotas", "set", "-t", "acme", "--gpu", "H100"),
        ("quotas", "set", "-t", "acme", "--gpu", "H100=lots"),
        ("quotas", "set", "-t", "acme", "--gpu", "H100=1:2:3:4"),
        ("quotas", "set", "-t", "acme", "--gpu", "H100=0.0001"),
        ("quotas", "set", "-t", "acme", "--weight", "0"),
        ("quotas", "set", "-t", "acme", "--weight", "1001"),
        ("quotas", "set", "-t", "acme", "--weight", "heavy"),
        ("quotas", "set", "-t", "acme", "-p", "vision", "--weight", "2"),
        ("keys", "create", "-t", "acme", "-u", "ada", "--name", "n", "--expires-at", "next tuesday"),
        ("clusters", "node-pool", "c1", "p1", "--label", "novalue"),
    ],
)
def test_bad_option_values_are_usage_errors(
    cli: Cli, gateway: FakeGateway, logged_in: dict[str, str], args: tuple[str, ...]
) -> None:
    result = cli(*args, env=logged_in)
    assert result.returncode == 2
    one_error_line(result)
    assert [req.method for req in gateway.seen if req.method != "GET"] == [], "nothing was sent"


def test_gpu_spec_parsing() -> None:
    assert quotas_cmd.parse_gpu("H100=8") == {
        "gpu_model": "H100",
        "nominal_milli": 8000,
        "borrowing_limit_milli": None,
        "lending_limit_milli": None,
    }
    assert quotas_cmd.parse_gpu("L4=0.25:250m:")["borrowing_limit_milli"] == 250
    for bad in ("=1", "H100=", "H100=-1", "bad model=1", "H100=1e400"):
        with pytest.raises(UsageError):
            quotas_cmd.parse_gpu(bad)


async def test_admin_bootstrap_over_nats(servers: Any, nc: NATS) -> None:
    from tessera_contracts import rpc
    from tessera_contracts.api.tenancy import Bootstrap, IssuedKey, KeyView
    from tessera_runtime.rpc import Call, RpcError, RpcServer

    names: list[str] = []
    server = RpcServer(nc, "tenancy")

    @server.operation("bootstrap", Bootstrap)
    async def bootstrap(call: Call, body: Bootstrap) -> IssuedKey:
        if names:
            raise RpcError(rpc.CONFLICT, "a platform admin already exists")
        names.append(body.name)
        key = KeyView(
            tenant="_system",
            key_id="k-1",
            user_id="u-1",
            name="bootstrap",
            prefix="tsk_1",
            created_at="2025-01-01T00:00:00Z",  # type: ignore[arg-type]
            expires_at=None,
            revoked_at=None,
            last_used_at=None,
        )
        return IssuedKey(key=key, secret="tsk_1_first_admin_secret")

    env = {"NATS_URL": servers.nats_url}
    missing = await asyncio.to_thread(tessera, "admin", "bootstrap", env=env)
    assert missing.returncode == 6 and "no tenancy service is running" in one_error_line(missing)

    await server.start()
    try:
        first = await asyncio.to_thread(tessera, "admin", "bootstrap", "--name", "root", env=env)
        assert first.returncode == 0, first.stderr
        assert first.stdout.count("tsk_1_first_admin_secret") == 1
        assert names == ["root"]
        again = await asyncio.to_thread(tessera, "admin", "bootstrap", env=env)
        assert again.returncode == 5
        assert one_error_line(again) == "tessera: error: a platform admin already exists (conflict)"
    finally:
        await server.stop()


def test_a_member_names_herself_without_listing_users(cli: Cli, gateway: FakeGateway, config: Path) -> None:
    env = {"TESSERA_CONFIG": str(config), "TESSERA_URL": gateway.url, "TESSERA_API_KEY": ADA_KEY}
    listed = cli("keys", "list", "-t", "acme", "-u", "ada@example.com", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [k["key_id"] for k in json.loads(listed.stdout)["items"]] == ["k_a"]
    created = cli("keys", "create", "-t", "acme", "-u", "ada@example.com", "--name", "ci", env=env)
    assert created.returncode == 0, created.stderr
    assert created.stdout.count("tsk_b_s3cr3t") == 1
    assert [(r.method, r.path) for r in gateway.seen] == [
        ("GET", "/v1/me"),
        ("GET", "/v1/tenants/acme/users/u_7/keys"),
        ("GET", "/v1/me"),
        ("POST", "/v1/tenants/acme/users/u_7/keys"),
    ], "her own name is resolved from /v1/me, never by listing the tenant's users"

    other = cli("keys", "list", "-t", "acme", "-u", "bob@example.com", env=env)  # someone else: listed, refused
    assert other.returncode == 3
    assert "not allowed on users" in one_error_line(other)
    same_name_elsewhere = cli("keys", "list", "-t", "globex", "-u", "ada@example.com", env=env)
    assert same_name_elsewhere.returncode != 0
    assert gateway.seen[-1].path == "/v1/tenants/globex/users", "a name in another tenant is not hers"


def test_an_admin_name_lookup_still_lists_users(cli: Cli, gateway: FakeGateway, logged_in: dict[str, str]) -> None:
    result = cli("keys", "list", "-t", "acme", "-u", "nobody@example.com", env=logged_in)
    assert result.returncode == 4
    assert one_error_line(result) == "tessera: error: user nobody@example.com not found in tenant acme (not-found)"
    assert [r.path for r in gateway.seen] == ["/v1/me", "/v1/tenants/acme/users"]


def test_a_write_still_in_progress_is_retried_with_the_same_key(
    cli: Cli, gateway: FakeGateway, logged_in: dict[str, str]
) -> None:
    gateway.in_progress = 2  # e.g. the first attempt timed out (504) and the gateway keeps its claim
    created = cli("tenants", "create", "slowpoke", "--display-name", "Slow", env=logged_in)
    assert created.returncode == 0, created.stderr
    posts = [r for r in gateway.seen if r.method == "POST"]
    assert len(posts) == 3 and len({r.headers["idempotency-key"] for r in posts}) == 1

    gateway.seen.clear()
    gateway.in_progress = 10
    stuck = cli("tenants", "create", "slowpoke", "--display-name", "Slow", env=logged_in)
    assert stuck.returncode == 5 and "still in progress" in one_error_line(stuck)
    assert len(gateway.seen) == 4, "3 retries, then the 409 is the answer"
    gateway.seen.clear()
    assert cli("tenants", "create", "dup", env=logged_in).returncode == 5
    assert len(gateway.seen) == 1, "a plain conflict (no Retry-After) is not retried"


def test_a_problem_field_errors_reach_the_one_line() -> None:
    import httpx

    from tessera_cli.client import ApiError

    problem = {
        "title": "Bad Request",
        "detail": "Validation failed for POST /v1/tenants/acme/projects/vision/jobs",
        "code": "invalid-request",
        "errors": [{"key": "worker.gpus", "message": "Expected `int` <= 64", "source": "body"}],
    }
    error = ApiError.from_response(httpx.Response(400, json=problem))
    assert str(error).endswith("jobs: worker.gpus: Expected `int` <= 64 (invalid-request)")
    assert error.exit_code == 1
    many = {**problem, "errors": [{"key": f"k{i}", "message": "bad"} for i in range(5)]}
    assert "k2: bad; and 2 more" in str(ApiError.from_response(httpx.Response(400, json=many)))


def test_a_closed_pipe_ends_quietly(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    from tessera_cli import contracts_cmd, main

    def write_to_a_closed_pipe(args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(contracts_cmd, "run_dump", write_to_a_closed_pipe)
    assert main.main(["contracts", "dump"]) == 0
    assert capfd.readouterr().err == ""


def test_a_bad_local_argument_is_a_usage_error(capfd: pytest.CaptureFixture[str]) -> None:
    from tessera_cli import main

    assert main.main(["bench", "kueue", "--fraction", "2"]) == 2
    assert capfd.readouterr().err.strip() == "tessera: error: --fraction must be in (0, 1], not 2.0"


def test_argument_errors_are_one_line_with_exit_2(capfd: pytest.CaptureFixture[str]) -> None:
    from tessera_cli import main

    with pytest.raises(SystemExit) as exited:
        main.main(["jobs", "submit", "-t", "acme", "-p", "vision", "--priority-class", "high", "--gpus", "1.5"])
    assert exited.value.code == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tessera: error: argument --gpus: invalid int value: '1.5'")
