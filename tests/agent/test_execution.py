from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from tessera_agent.execution import JobProcess, LaunchError, job_environment
from tessera_contracts.events.scheduler import DeviceShareInfo, WorkerPlacement

FULL = WorkerPlacement(
    worker=0,
    node="n1",
    devices=(
        DeviceShareInfo(uuid="GPU-aaa", milli=1000, memory_mib=81920),
        DeviceShareInfo(uuid="GPU-bbb", milli=1000, memory_mib=81920),
    ),
)
FRACTION = WorkerPlacement(worker=1, node="n1", devices=(DeviceShareInfo(uuid="GPU-ccc", milli=255, memory_mib=20480),))
CPU_ONLY = WorkerPlacement(worker=0, node="n1", devices=())


class Output:
    def __init__(self) -> None:
        self.batches: list[tuple[str, list[str]]] = []
        self.seen = asyncio.Event()

    def __call__(self, stream: str, lines: list[str]) -> None:
        self.batches.append((stream, list(lines)))
        self.seen.set()

    def lines(self, stream: str) -> list[str]:
        return [line for s, batch in self.batches if s == stream for line in batch]


def py(script: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(script)]


def job(tmp_path: Path, command: list[str], out: Output, **kw: object) -> JobProcess:
    kw.setdefault("placement", FULL)
    return JobProcess(
        job_id="j_0123",
        allocation_id="a_1",
        command=command,
        root=tmp_path,
        on_output=out,
        **kw,  # type: ignore[arg-type]
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in {"Z", "X"}


# --- environment ---------------------------------------------------------------------------------


def test_environment_full_devices() -> None:
    env = job_environment("j_1", "a_1", FULL, {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0"}, {"X": "1"})
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-aaa,GPU-bbb"
    assert env["TESSERA_GPU_MILLI"] == "2000"
    assert env["TESSERA_GPU_MEMORY_MIB"] == "163840"
    assert env["PATH"] == "/bin" and env["X"] == "1"
    assert not any(k.startswith("CUDA_MPS_") for k in env)


def test_environment_fraction_and_cpu_only() -> None:
    env = job_environment("j_1", "a_1", FRACTION, {}, {})
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "26"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "GPU-ccc=20480M"
    assert env["TESSERA_GPU_MILLI"] == "255"
    cpu = job_environment("j_1", "a_1", CPU_ONLY, {}, {})
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and cpu["TESSERA_GPU_MILLI"] == "0"


def test_environment_job_cannot_override_reserved() -> None:
    env = job_environment(
        "j_1",
        "a_1",
        FRACTION,
        {},
        {"CUDA_VISIBLE_DEVICES": "GPU-zzz", "TESSERA_JOB_ID": "x", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"},
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-ccc"
    assert env["TESSERA_JOB_ID"] == "j_1"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "26"


# --- process -------------------------------------------------------------------------------------


async def test_success(tmp_path: Path) -> None:
    out = Output()
    p = job(tmp_path, py("import os; print('hello'); print(os.getcwd())"), out)
    pid = await p.start()
    assert pid > 0
    result = await p.wait()
    assert result.outcome == "succeeded" and result.exit_code == 0 and result.signal is None
    assert out.lines("stdout") == ["hello", str(tmp_path / "j_0123" / "0")]


async def test_nonzero_exit_with_stderr_tail(tmp_path: Path) -> None:
    out = Output()
    script = """
        import sys
        for i in range(30):
            print(f"err {i}", file=sys.stderr)
        sys.exit(3)
    """
    p = job(tmp_path, py(script), out)
    await p.start()
    result = await p.wait()
    assert result.outcome == "failed" and result.exit_code == 3
    assert result.stderr_tail == [f"err {i}" for i in range(10, 30)]
    assert "exited with code 3" in result.message and "err 29" in result.message and "err 9\n" not in result.message


async def test_killed_by_own_signal_is_failed(tmp_path: Path) -> None:
    out = Output()
    p = job(tmp_path, py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"), out)
    await p.start()
    result = await p.wait()
    assert result.outcome == "failed" and result.exit_code is None and result.signal == 9
    assert "SIGKILL" in result.message


async def test_nonexistent_command(tmp_path: Path) -> None:
    p = job(tmp_path, ["/nonexistent/tessera-no-such-program"], Output())
    with pytest.raises(LaunchError, match="command not found"):
        await p.start()
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\n")
    p = job(tmp_path, [str(script)], Output())
    with pytest.raises(LaunchError, match="permission denied"):
        await p.start()


async def test_max_runtime_times_out(tmp_path: Path) -> None:
    p = job(tmp_path, py("import time; time.sleep(30)"), Output(), max_runtime_s=0.3, timeout_grace_s=0.3)
    await p.start()
    result = await p.wait()
    assert result.outcome == "timed_out" and result.signal == 15
    assert "maximum runtime of 0.3 s" in result.message


async def test_stop_escalates_to_sigkill_and_kills_the_group(tmp_path: Path) -> None:
    out = Output()
    script = f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([{sys.executable!r}, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
        time.sleep(0.2)
        print("ready", child.pid, flush=True)
        time.sleep(60)
    """
    p = job(tmp_path, py(script), out)
    await p.start()
    await asyncio.wait_for(out.seen.wait(), 5)
    grandchild = int(out.lines("stdout")[0].split()[1])
    assert alive(grandchild)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    result = await p.stop("cancelled by user", grace_s=0.3)
    assert loop.time() - t0 >= 0.3
    assert result.outcome == "killed" and result.signal == 9
    assert "cancelled by user" in result.message
    assert await p.stop("again", grace_s=0.3) == result  # idempotent
    for _ in range(50):
        if not alive(grandchild):
            break
        await asyncio.sleep(0.02)
    assert not alive(grandchild)


async def test_environment_seen_by_process(tmp_path: Path) -> None:
    out = Output()
    p = job(
        tmp_path,
        py("import json, os; print(json.dumps(dict(os.environ)))"),
        out,
        placement=FRACTION,
        base_env={"PATH": os.environ.get("PATH", "/usr/bin")},
        job_env={"CUDA_VISIBLE_DEVICES": "GPU-zzz", "MY_VAR": "x"},
    )
    await p.start()
    assert (await p.wait()).outcome == "succeeded"
    env = json.loads(out.lines("stdout")[0])
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-ccc"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "26"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "GPU-ccc=20480M"
    assert env["TESSERA_JOB_ID"] == "j_0123" and env["TESSERA_ALLOCATION_ID"] == "a_1"
    assert env["TESSERA_GPU_MILLI"] == "255" and env["TESSERA_GPU_MEMORY_MIB"] == "20480"
    assert env["MY_VAR"] == "x"


async def test_output_batching_in_order(tmp_path: Path) -> None:
    out = Output()
    script = """
        import sys, time
        for i in range(250):
            print(f"line {i}")
        sys.stdout.flush()
        time.sleep(0.2)
        print("late", flush=True)
        time.sleep(1.0)
    """
    p = job(tmp_path, py(script), out)
    loop = asyncio.get_running_loop()
    await p.start()
    t0 = loop.time()
    while "late" not in out.lines("stdout"):
        await asyncio.wait_for(out.seen.wait(), 2)
        out.seen.clear()
    assert loop.time() - t0 < 1.1  # delivered while the process still runs, within the batch interval
    assert (await p.wait()).outcome == "succeeded"
    assert out.lines("stdout") == [f"line {i}" for i in range(250)] + ["late"]
    assert all(len(batch) <= 100 for _, batch in out.batches)
