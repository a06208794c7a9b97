"""The ``tessera`` command as a user runs it: a real process, real servers, exit codes and output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import asyncpg

from tessera_runtime.audit import AUDIT
from tessera_runtime.eventlog import AppendRequest, EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.testing import sample_event, sample_ref


def tessera(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "-m", "tessera_cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
    )


def test_dev_up_status_env_down(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    began = time.monotonic()
    up = tessera("dev", "up", "--home", home)
    assert up.returncode == 0, up.stderr
    assert time.monotonic() - began < 10, "both servers must answer within 10 s"
    try:
        assert "nats://127.0.0.1:" in up.stdout and "postgresql://" in up.stdout
        assert tessera("dev", "status", "--home", home).returncode == 0
        env = tessera("dev", "env", "--home", home)
        lines = dict(line.removeprefix("export ").split("=", 1) for line in env.stdout.splitlines())
        assert set(lines) == {"NATS_URL", "DATABASE_URL"}
        # A command with no URLs finds the running stack through TESSERA_HOME.
        status = tessera("projections", "status", env={"TESSERA_HOME": home})
        assert status.returncode == 0, status.stderr
        assert "audit" in status.stdout
    finally:
        down = tessera("dev", "down", "--home", home)
    assert down.returncode == 0 and "stopped" in down.stdout
    after = tessera("dev", "status", "--home", home)
    assert after.returncode == 1 and "no stack running" in after.stdout


def test_no_servers_is_one_plain_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    result = tessera("replay", "verify", "--all", env={"TESSERA_HOME": str(tmp_path)})
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("tessera: error: no stack running")


def test_bad_arguments_exit_nonzero_with_one_line(servers: object) -> None:
    urls = ["--nats-url", servers.nats_url, "--database-url", servers.database_url]  # type: ignore[attr-defined]
    unknown = tessera("replay", "verify", "nosuch", *urls)
    assert unknown.returncode == 1
    assert (
        unknown.stderr.strip() == "tessera: error: unknown projection(s) nosuch; registered: audit, scheduler, tenancy"
    )
    nothing = tessera("replay", "verify", *urls)
    assert nothing.returncode != 0 and "--all" in nothing.stderr
    bad_number = tessera("bench", "eventlog", "--events", "-3")
    assert bad_number.returncode == 2 and "positive" in bad_number.stderr


async def test_replay_verify_all_passes_then_fails_on_a_tampered_row(
    servers: object, log: EventLog, pool: asyncpg.Pool, database_url: str
) -> None:
    refs = [sample_ref(i) for i in range(10)]
    await log.append_many([AppendRequest(r.subject, [sample_event(r, 1), sample_event(r, 2)], 0) for r in refs])
    await Projector(AUDIT, pool, log).catch_up()
    urls = ["--nats-url", servers.nats_url, "--database-url", database_url]  # type: ignore[attr-defined]
    ok = tessera("replay", "verify", "--all", *urls)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("audit: equal at sequence 20")
    await pool.execute("UPDATE proj_audit.events SET tenant = 'intruder' WHERE seq = 7")
    bad = tessera("replay", "verify", "--all", "--json", *urls)
    assert bad.returncode == 1
    [result] = json.loads(bad.stdout)
    assert result["equal"] is False
    [diff] = result["diffs"]
    assert diff["table"] == "events"
    assert diff["only_in_live"][0].startswith("(7,") and "intruder" in diff["only_in_live"][0]
    assert diff["only_in_rebuilt"][0].startswith("(7,") and ",acme," in diff["only_in_rebuilt"][0]
    rebuilt = tessera("replay", "rebuild", "audit", *urls)
    assert rebuilt.returncode == 0 and "rebuilt to sequence 20" in rebuilt.stdout
    assert tessera("replay", "verify", "audit", *urls).returncode == 0


def test_contracts_dump(tmp_path: Path) -> None:
    result = tessera("contracts", "dump", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "envelope.schema.json").exists()


def test_bench_eventlog_prints_its_json(servers: object, database_url: str) -> None:
    result = tessera(
        "bench", "eventlog", "--json", "--events", "500", "--aggregates", "50", "--replay-events", "800",
        "--nats-url", servers.nats_url, "--database-url", database_url,  # type: ignore[attr-defined]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    for key in ("append_events_per_s", "project_events_per_s", "replay_events_per_s", "payload_bytes"):
        assert figures[key] > 0
    assert figures["events"] == 500 and figures["replay_events"] >= 800


def test_an_unreachable_server_fails_fast_with_one_line(servers: object) -> None:
    began = time.monotonic()
    result = tessera(
        "replay", "verify", "--all", "--nats-url", "nats://127.0.0.1:1",
        "--database-url", servers.database_url,  # type: ignore[attr-defined]
    )  # fmt: skip
    assert result.returncode == 1
    assert time.monotonic() - began < 15
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("tessera: error: could not connect to NATS")
