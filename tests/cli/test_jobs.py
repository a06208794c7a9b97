"""``tessera jobs`` and ``tessera nodes`` against a small fake gateway: what is sent, what is printed, exit codes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tessera_cli.main import main

KEY = "tsk_jobs_0123456789abcdef"
JOB_ID = "j_" + "a" * 26
JOB = {
    "tenant": "acme",
    "project": "vision",
    "queue": "default",
    "id": JOB_ID,
    "name": "train.py",
    "state": "placed",
    "priority_class": "high",
    "priority": 100,
    "preemptible": False,
    "workers": 2,
    "gpus": 1,
    "milli": 500,
    "gpu_memory_mib": None,
    "mig_profile": None,
    "gpu_models": ["H100"],
    "gpu_model": "H100",
    "borrowed_milli": 0,
    "placements": [{"worker": 0, "node": "n1", "devices": [], "cpu_milli": 0, "memory_mib": 0}],
    "reason": None,
    "message": None,
    "preemptions": 0,
    "last_preemption": None,
    "outcome": None,
    "submitted_by": "u_1",
    "submitted_at": "2026-01-01T00:00:00Z",
    "admitted_at": None,
    "placed_at": None,
    "ended_at": None,
}
NODE = {
    "node": "n1",
    "cluster": "c1",
    "region": "eu",
    "labels": {"zone": "a"},
    "state": "ready",
    "gpus": 8,
    "gpu_models": ["H100"],
    "allocated_milli": 2500,
    "capacity_milli": 8000,
    "registered_at": "2026-01-01T00:00:00Z",
}


@dataclass
class Fake:
    url: str = ""
    seen: list[tuple[str, str, dict[str, list[str]], Any]] = field(default_factory=list)

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if (method, path) == ("POST", "/v1/tenants/acme/projects/vision/jobs"):
            return 201, {**JOB, "name": body["name"], "state": "pending"}
        if (method, path) == ("GET", "/v1/tenants/acme/jobs"):
            if "after" not in query:
                return 200, {"items": [JOB], "next": "c1"}
            return 200, {"items": [{**JOB, "id": "j_" + "b" * 26, "state": "pending", "reason": "NoFit"}], "next": None}
        if (method, path) == ("GET", f"/v1/tenants/acme/jobs/{JOB_ID}/explain"):
            history = [{"at": "2026-01-01T00:00:00Z", "type": "queued", "summary": "waiting (NoFit): no node"}]
            return 200, {"job": JOB, "summary": "waiting (NoFit): 8 GPUs needed, 2 free", "history": history}
        if (method, path) == ("POST", f"/v1/tenants/acme/jobs/{JOB_ID}/cancel"):
            return 409, {
                "type": "x",
                "title": "Conflict",
                "status": 409,
                "code": "conflict",
                "detail": "job has finished",
            }
        if (method, path) == ("GET", "/v1/nodes"):
            return 200, {"items": [NODE], "next": None}
        return 404, {"type": "x", "title": "Not found", "status": 404, "code": "not-found", "detail": f"no {path}"}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fake]:
    state = Fake()

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            query = parse_qs(parts.query)
            state.seen.append((self.command, parts.path, query, body))
            status, answer = state.answer(self.command, parts.path, query, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            kind = "application/problem+json" if status >= 400 else "application/json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _handle

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("TESSERA_URL", state.url)
    monkeypatch.setenv("TESSERA_API_KEY", KEY)
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_submit_sends_the_command_and_resources(fake: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "jobs", "submit", "-t", "acme", "-p", "vision", "--priority-class", "high", "--milli", "500",
            "--model", "H100", "--workers", "2", "--label", "zone=a", "--region", "eu", "--env", "SEED=1",
            "--max-runtime", "3600", "--no-preempt", "--", "/usr/bin/python", "train.py", "--lr", "0.1",
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    [(method, path, _, body)] = fake.seen
    assert (method, path) == ("POST", "/v1/tenants/acme/projects/vision/jobs")
    assert body == {
        "name": "python",
        "queue": "default",
        "priority_class": "high",
        "workers": 2,
        "worker": {"gpus": 1, "cpu_milli": 0, "memory_mib": 0, "milli": 500, "gpu_models": ["H100"]},
        "selector": {"labels": {"zone": "a"}, "region": "eu"},
        "command": ["/usr/bin/python", "train.py", "--lr", "0.1"],
        "env": {"SEED": "1"},
        "max_runtime_s": 3600,
        "preemptible": False,
    }
    out = capsys.readouterr().out
    assert JOB_ID in out and "2x 500m" in out and "pending" in out


def test_submit_json_and_mig(fake: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["jobs", "submit", "-t", "acme", "-p", "vision", "--priority-class", "high", "--mig", "1g.10gb"]
    assert main([*args, "--name", "m", "--json", "--", "run"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "m"
    assert fake.seen[0][3]["worker"]["mig_profile"] == "1g.10gb"


@pytest.mark.parametrize(
    "extra",
    [
        [],  # no command
        ["--gpus", "2", "--milli", "500", "--", "x"],
        ["--gpus", "0", "--mig", "1g.10gb", "--", "x"],
        ["--gpus", "-1", "--", "x"],
        ["--env", "NOEQUALS", "--", "x"],
        ["--label", "=v", "--", "x"],
    ],
)
def test_submit_usage_errors_exit_2_and_send_nothing(
    fake: Fake, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    code = main(["jobs", "submit", "-t", "acme", "-p", "vision", "--priority-class", "high", *extra])
    assert code == 2
    assert capsys.readouterr().err.startswith("tessera: error: ")
    assert fake.seen == []


def test_exclusive_shares_are_an_argparse_error(fake: Fake) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["jobs", "submit", "-t", "a", "-p", "v", "--priority-class", "h", "--milli", "5", "--mig", "1g.10gb"])
    assert exc.value.code == 2


def test_list_follows_pages_with_the_filters(fake: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "list", "-t", "acme", "-p", "vision", "--state", "placed", "--queue", "default"]) == 0
    queries = [q for _, _, q, _ in fake.seen]
    assert all(q["project"] == ["vision"] and q["state"] == ["placed"] and q["queue"] == ["default"] for q in queries)
    assert [q.get("after") for q in queries] == [None, ["c1"]]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["ID", "NAME", "PROJECT", "QUEUE", "STATE"]
    assert len(lines) == 3 and "NoFit" in lines[2] and "high (100)" in lines[1]


def test_explain_prints_the_summary_then_the_history(fake: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "explain", "-t", "acme", JOB_ID]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "waiting (NoFit): 8 GPUs needed, 2 free"
    assert "EVENT" in out and "waiting (NoFit): no node" in out


def test_cancel_of_an_ended_job_is_a_conflict(fake: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "cancel", "-t", "acme", JOB_ID, "--reason", "oops"]) == 5
    assert capsys.readouterr().err.strip() == "tessera: error: job has finished (conflict)"
    assert fake.seen[0][3] == {"reason": "oops"}
    assert main(["jobs", "get", "-t", "acme", "j_" + "c" * 26]) == 4


def test_nodes_list(fake: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nodes", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[0] == "NODE" and "2.5/8" in out[1] and "zone=a" in out[1]
