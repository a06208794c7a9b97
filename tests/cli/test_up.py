"""``tessera up`` / ``down`` / ``status`` with stand-in services, as a user runs them: real processes.

The real services are written in parallel, so each test swaps the supervisor's table for small
stand-in modules (written to a temporary folder on ``PYTHONPATH``): one answers the NATS health
request like a service, one answers ``GET /healthz`` like the gateway, one never answers, one
does not exist (exits at once). ``tessera`` runs as ``python -c`` that replaces
``supervisor.SERVICES`` and then calls ``main``, so everything else is the real command.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tessera_cli import supervisor
from tessera_runtime import devstack

NATS_SERVICE = """\
import asyncio, os, signal, sys

import msgspec
import nats

from tessera_runtime.rpc import RpcServer


class Health(msgspec.Struct):
    status: str = "ok"


async def main(name: str) -> None:
    nc = await nats.connect(os.environ["NATS_URL"])
    server = RpcServer(nc, name)

    @server.operation("health")
    async def health(call, body):
        return Health()

    await server.start()
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await nc.drain()
    print("stopped cleanly", flush=True)


asyncio.run(main(sys.argv[sys.argv.index("--name") + 1]))
"""

HTTP_SERVICE = """\
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


host, port = sys.argv[sys.argv.index("--host") + 1], int(sys.argv[sys.argv.index("--port") + 1])
HTTPServer((host, port), Handler).serve_forever()
"""

SILENT_SERVICE = "import time\ntime.sleep(3600)\n"

RUNNER = """\
import json, sys
from tessera_cli import supervisor
from tessera_cli.main import main
supervisor.SERVICES[:] = [
    supervisor.Service(r["name"], r["module"], tuple(r.get("args", ())), r.get("http_health"))
    for r in json.loads(sys.argv[1])
]
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def stand_ins(tmp_path: Path) -> Path:
    folder = tmp_path / "stand_ins"
    folder.mkdir()
    (folder / "standin_nats.py").write_text(NATS_SERVICE)
    (folder / "standin_http.py").write_text(HTTP_SERVICE)
    (folder / "standin_silent.py").write_text(SILENT_SERVICE)
    return folder


@pytest.fixture
def marker() -> str:
    """A token in every stand-in's command line, to find leftover processes."""
    return f"m{uuid.uuid4().hex[:10]}"


def nats_row(marker: str) -> dict[str, Any]:
    return {"name": marker, "module": "standin_nats", "args": ["--name", marker]}


def http_row(marker: str) -> dict[str, Any]:
    args = ["--host", "{host}", "--port", "{port}", "--tag", marker]
    return {"name": "web", "module": "standin_http", "args": args, "http_health": "/healthz"}


def env_for(stand_ins: Path, servers: Any | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL", "TESSERA_HOME")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(stand_ins), os.environ.get("PYTHONPATH")) if p)
    if servers is not None:
        env |= {"NATS_URL": servers.nats_url, "DATABASE_URL": servers.database_url}
    return env


def tessera(table: list[dict[str, Any]], *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(table), *args],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv and supervisor.pid_alive(int(entry)):
            found.append(int(entry))
    return found


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tessera: error: ")
    return lines[0]


def test_the_table_has_tenancy_and_the_gateway() -> None:
    rows = {s.name: s for s in supervisor.SERVICES}
    assert rows["tenancy"].module == "tessera_tenancy" and rows["tenancy"].http_health is None
    gateway = rows["gateway"]
    assert gateway.http_health == "/healthz"
    assert gateway.argv("127.0.0.1", 8080)[1:] == ["-m", "tessera_gateway", "--host", "127.0.0.1", "--port", "8080"]


def test_up_detach_status_and_down(stand_ins: Path, marker: str, tmp_path: Path) -> None:
    home, port, env = tmp_path / "home", free_port(), env_for(stand_ins, None)
    table = [nats_row(marker), http_row(marker)]
    devstack.up(home)  # a stack someone started before `tessera up`: used, and left running by `down`
    try:
        _up_status_down(home, port, env, table, marker)
        assert devstack.status(home) is not None
    finally:
        devstack.down(home)


def _up_status_down(home: Path, port: int, env: dict[str, str], table: list[dict[str, Any]], marker: str) -> None:
    up = tessera(table, "up", "--detach", "--port", str(port), "--home", str(home), env=env)
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip() == f"http://127.0.0.1:{port}"
    pids = {f.stem: int(f.read_text()) for f in (home / "run").glob("*.pid")}
    assert set(pids) == {marker, "web"}
    assert sorted(processes_with(marker)) == sorted(pids.values())
    assert "ready" in (home / "logs" / f"{marker}.log").read_text()

    # Independent reads run side by side: each `tessera` process pays about a second of start-up.
    with ThreadPoolExecutor() as pool:
        again_f = pool.submit(
            tessera, table, "up", "--detach", "--port", str(free_port()), "--home", str(home), env=env
        )
        status_f = pool.submit(tessera, table, "status", "--home", str(home), env=env)
        report_f = pool.submit(tessera, table, "status", "--json", "--home", str(home), env=env)
    again, status = again_f.result(), status_f.result()
    assert again.returncode == 1 and "already running" in one_error_line(again)
    assert status.returncode == 0, status.stdout + status.stderr
    lines = {line.split()[0]: line.split() for line in status.stdout.splitlines()}
    assert lines[marker] == [marker, "pid", str(pids[marker]), "healthy"]
    assert lines["web"] == ["web", "pid", str(pids["web"]), "healthy", f"http://127.0.0.1:{port}"]
    report = json.loads(report_f.result().stdout)
    assert report["healthy"] is True and report["gateway_url"] == f"http://127.0.0.1:{port}"
    assert {s["name"]: s["pid"] for s in report["services"]} == pids

    down = tessera(table, "down", "--home", str(home), env=env)
    assert down.returncode == 0, down.stderr
    assert down.stdout.splitlines() == [f"stopped web (pid {pids['web']})", f"stopped {marker} (pid {pids[marker]})"]
    assert processes_with(marker) == []
    assert list((home / "run").iterdir()) == []
    assert "stopped cleanly" in (home / "logs" / f"{marker}.log").read_text(), "SIGTERM, not SIGKILL"

    with ThreadPoolExecutor() as pool:
        after_f = pool.submit(tessera, table, "status", "--home", str(home), env=env)
        idempotent_f = pool.submit(tessera, table, "down", "--home", str(home), env=env)
    after, idempotent = after_f.result(), idempotent_f.result()
    assert after.returncode == 1
    assert all(line.split()[-1] == "stopped" for line in after.stdout.splitlines())
    assert idempotent.returncode == 0 and idempotent.stdout.strip() == "nothing was running"


def test_a_service_that_exits_at_once_fails_up_and_leaves_nothing(
    servers: Any, stand_ins: Path, marker: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    table = [nats_row(marker), {"name": "broken", "module": "tessera_no_such_module"}]
    began = time.monotonic()
    up = tessera(
        table, "up", "--detach", "--port", str(free_port()), "--home", str(home), env=env_for(stand_ins, servers)
    )
    assert up.returncode == 1
    line = one_error_line(up)
    assert line.startswith("tessera: error: broken exited during start-up with status 1")
    assert "No module named tessera_no_such_module" in line
    assert line.endswith(f"; see {home / 'logs' / 'broken.log'}")
    assert time.monotonic() - began < 20, "an exit is noticed at once, not after the health timeout"
    assert processes_with(marker) == []
    assert list((home / "run").iterdir()) == []


def test_a_service_that_never_answers_times_out(servers: Any, stand_ins: Path, marker: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    table = [{"name": "silent", "module": "standin_silent", "args": ["--tag", marker]}]
    up = tessera(table, "up", "--detach", "--timeout", "1.5", "--home", str(home), env=env_for(stand_ins, servers))
    assert up.returncode == 1
    assert one_error_line(up) == (
        f"tessera: error: silent did not become healthy in 1.5s; see {home / 'logs' / 'silent.log'}"
    )
    assert processes_with(marker) == []
    assert list((home / "run").iterdir()) == []


def test_a_taken_port_is_one_clear_line(servers: Any, stand_ins: Path, marker: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        up = tessera(
            [http_row(marker)], "up", "-d", "--port", str(port), "--home", str(home), env=env_for(stand_ins, servers)
        )
    assert up.returncode == 1
    assert one_error_line(up).startswith(f"tessera: error: port {port} on 127.0.0.1 is taken")
    assert processes_with(marker) == []


def test_foreground_up_starts_its_own_stack_and_stops_everything_on_sigterm(
    stand_ins: Path, marker: str, tmp_path: Path
) -> None:
    home, port, env = tmp_path / "home", free_port(), env_for(stand_ins, None)
    table = [nats_row(marker), http_row(marker)]
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, json.dumps(table), "up", "--port", str(port), "--home", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        printed = []
        for line in proc.stdout:
            printed.append(line)
            if line.startswith("Ctrl-C stops everything"):
                break
        assert f"gateway  http://127.0.0.1:{port}\n" in printed, "".join(printed)
        pids = {f.stem: f.read_text().strip() for f in (home / "run").glob("*.pid")}
        assert any(line.split()[:2] == [marker, pids[marker]] for line in printed), "".join(printed)
        assert devstack.status(home) is not None, "up started the embedded stack"
        status = tessera(table, "status", "--home", str(home), env=env)
        assert status.returncode == 0, status.stdout
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            tessera(table, "down", "--home", str(home), env=env)
    assert proc.returncode == 0, err
    assert f"stopped web, {marker} and the embedded stack" in out
    assert processes_with(marker) == []
    assert devstack.status(home) is None, "the stack up started is stopped with it"
    assert not list((home / "run").glob("*"))


def test_up_starts_again_a_service_that_died_and_keeps_the_others(
    servers: Any, stand_ins: Path, marker: str, tmp_path: Path
) -> None:
    home, port, env = tmp_path / "home", free_port(), env_for(stand_ins, servers)
    table = [nats_row(marker), http_row(marker)]
    up = tessera(table, "up", "--detach", "--port", str(port), "--home", str(home), env=env)
    assert up.returncode == 0, up.stderr
    try:
        pids = {f.stem: int(f.read_text()) for f in (home / "run").glob("*.pid")}
        os.kill(pids[marker], signal.SIGKILL)  # the NATS service dies; the web one keeps running
        deadline = time.monotonic() + 10
        while supervisor.pid_alive(pids[marker]) and time.monotonic() < deadline:
            time.sleep(0.05)
        status = tessera(table, "status", "--home", str(home), env=env)
        assert status.returncode == 1
        assert {line.split()[0]: line.split()[3] for line in status.stdout.splitlines()} == {
            marker: "stopped",
            "web": "healthy",
        }

        # Another --port: the web service is kept where it is, and its URL is still the one printed.
        again = tessera(table, "up", "--detach", "--port", str(free_port()), "--home", str(home), env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == f"http://127.0.0.1:{port}"
        assert f"started {marker}" in again.stderr
        now = {f.stem: int(f.read_text()) for f in (home / "run").glob("*.pid")}
        assert now["web"] == pids["web"], "the running service is kept"
        assert now[marker] != pids[marker] and supervisor.pid_alive(now[marker])
        assert sorted(processes_with(marker)) == sorted(now.values())
        report = json.loads(tessera(table, "status", "--json", "--home", str(home), env=env).stdout)
        assert report["healthy"] is True and report["gateway_url"] == f"http://127.0.0.1:{port}"
        assert {s["name"]: s["pid"] for s in report["services"]} == now

        everything = tessera(table, "up", "--detach", "--port", str(port), "--home", str(home), env=env)
        assert everything.returncode == 1 and "already running" in one_error_line(everything)
    finally:
        down = tessera(table, "down", "--home", str(home), env=env)
    assert down.returncode == 0, down.stderr
    assert down.stdout.splitlines() == [f"stopped web (pid {now['web']})", f"stopped {marker} (pid {now[marker]})"]
    assert processes_with(marker) == []


def test_a_restarted_service_that_fails_is_stopped_and_the_others_are_kept(
    servers: Any, stand_ins: Path, marker: str, tmp_path: Path
) -> None:
    home, env = tmp_path / "home", env_for(stand_ins, servers)
    table = [nats_row(marker), http_row(marker)]
    assert tessera(table, "up", "-d", "--port", str(free_port()), "--home", str(home), env=env).returncode == 0
    try:
        pids = {f.stem: int(f.read_text()) for f in (home / "run").glob("*.pid")}
        os.kill(pids["web"], signal.SIGKILL)
        while supervisor.pid_alive(pids["web"]):
            time.sleep(0.05)
        broken = [nats_row(marker), {**http_row(marker), "module": "tessera_no_such_module"}]
        up = tessera(broken, "up", "-d", "--port", str(free_port()), "--home", str(home), env=env)
        assert up.returncode == 1
        assert one_error_line(up).startswith("tessera: error: web exited during start-up")
        assert processes_with(marker) == [pids[marker]], "the service that was running is left running"
        assert {f.stem for f in (home / "run").glob("*.pid")} == {marker}
    finally:
        assert tessera(table, "down", "--home", str(home), env=env).returncode == 0
    assert processes_with(marker) == []
