"""Tenant NATS credentials, against a real nats-server configured by the project's generator."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import nats
import nats.errors
import pytest

from tessera_runtime.devstack import EmbeddedNats


@pytest.fixture
def auth_dir(tmp_path: Path) -> Path:
    out = tmp_path / "auth"
    result = subprocess.run(
        [sys.executable, "-m", "tessera_cli.main", "infra", "nats-auth", "--tenant", "acme", "--tenant", "globex",
         "--out", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


async def test_a_tenant_subscriber_sees_only_its_own_subjects(auth_dir: Path, tmp_path: Path) -> None:
    creds = {c["user"]: c for c in json.loads((auth_dir / "credentials.json").read_text())}
    assert stat.S_IMODE(os.stat(auth_dir / "credentials.json").st_mode) == 0o600
    conf = (auth_dir / "auth.conf").read_text()
    assert all(c["password"] not in conf for c in creds.values()), "the server config holds hashes only"

    server = EmbeddedNats(tmp_path / "nats", extra_config=conf)
    server.start()
    try:
        port = server.port
        url = lambda user: f"nats://{user}:{creds[user]['password']}@127.0.0.1:{port}"  # noqa: E731
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        service = await nats.connect(url("tessera"))
        acme = await nats.connect(url("tenant-acme"), error_cb=on_error, max_reconnect_attempts=0)
        got: list[str] = []

        async def collect(msg: nats.aio.msg.Msg) -> None:
            got.append(msg.subject)

        await acme.subscribe("ev.*.acme.>", cb=collect)
        await acme.subscribe("export.acme.>", cb=collect)
        await acme.subscribe("ev.*.globex.>", cb=collect)  # refused by the server
        await acme.subscribe("ev.>", cb=collect)  # refused: wider than its tenant
        await acme.flush()
        for subject in ("ev.tenancy.acme.tenant.acme", "ev.tenancy.globex.tenant.globex", "export.acme.usage",
                        "export.globex.usage"):  # fmt: skip
            await service.publish(subject, b"{}")
        await service.flush()
        await asyncio.sleep(0.5)
        assert sorted(got) == ["ev.tenancy.acme.tenant.acme", "export.acme.usage"]
        assert sorted(e.lower() for e in errors) == [
            'nats: permissions violation for subscription to "ev.*.globex.>"',
            'nats: permissions violation for subscription to "ev.>"',
        ]

        await acme.publish("ev.tenancy.acme.tenant.acme", b"forged")  # may not publish at all
        await acme.flush()
        await asyncio.sleep(0.2)
        assert any("permissions violation for publish" in e.lower() for e in errors), errors

        with pytest.raises((nats.errors.Error, OSError)):
            await nats.connect(
                f"nats://tenant-acme:wrong@127.0.0.1:{port}", max_reconnect_attempts=0, allow_reconnect=False
            )
        await acme.close()
        await service.close()
    finally:
        server.stop()


def test_bad_tenant_names_are_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tessera_cli.main", "infra", "nats-auth", "--tenant", "acme.>", "--out", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.startswith("tessera: error: invalid tenant token")
    assert not (tmp_path / "auth.conf").exists()
