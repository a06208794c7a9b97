"""One worker of a job as a supervised local process.

A :class:`JobProcess` starts the worker's command as an asyncio subprocess in its own working
directory (``<root>/<job_id>/<worker>``) and its own process group (a new session), with the
environment of :func:`~tessera_agent.execution.environment.job_environment`. It streams the
process's output, line by line and in batches, to an injected callback, enforces the job's maximum
runtime and stops the whole process group on request (SIGTERM, then SIGKILL after a grace period).
Its :class:`Exit` is what the agent turns into ``JobFinished``.

Units: durations in seconds.

When the worker's main process exits, whatever it left behind in its process group is killed too:
the allocation ends with the main process, and leftovers would keep using devices that are no
longer charged to the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import signal
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tessera_agent.execution.environment import job_environment
from tessera_contracts.events.scheduler import Outcome, WorkerPlacement

log = logging.getLogger(__name__)

OutputCallback = Callable[[str, list[str]], Awaitable[None] | None]
"""``on_output(stream, lines)``: ``stream`` is ``"stdout"`` or ``"stderr"``; may be sync or async."""

TAIL_LINES = 20
"""How many of the last stderr lines an :class:`Exit` keeps."""

LINE_LIMIT_BYTES = 1 << 20
"""Longest output line read whole (bytes); a longer line is replaced by a marker."""

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class LaunchError(Exception):
    """The worker's command could not be started (not found, not executable, bad working directory).

    The message says why, in words; the agent reports it as ``JobFinished(outcome="failed")``.
    """


@dataclass(frozen=True, slots=True)
class Exit:
    """How a worker process ended.

    Attributes:
        outcome: ``succeeded`` (exit code 0), ``failed`` (non-zero exit code, or a signal the agent
            did not send), ``killed`` (after :meth:`JobProcess.stop`), ``timed_out`` (the maximum
            runtime was reached and the agent stopped it).
        exit_code: the exit code, or None when the process was ended by a signal.
        signal: the number of the signal that ended the process, or None when it exited by itself.
        stderr_tail: the last :data:`TAIL_LINES` lines of its stderr, oldest first.
        message: a human-readable account, self-contained (it includes the stderr tail for a failure).
    """

    outcome: Outcome
    exit_code: int | None
    signal: int | None
    stderr_tail: list[str]
    message: str


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class JobProcess:
    """One worker of a job, run and supervised as a local process group.

    Args:
        job_id: the job; names the working directory and is exported as ``TESSERA_JOB_ID``.
        allocation_id: the allocation the worker runs under (``TESSERA_ALLOCATION_ID``).
        placement: the worker's placement (devices and shares; ``worker`` names the directory).
        command: the program and its arguments (``JobSubmitted.command``); the program is looked up
            in the ``PATH`` of the job's environment.
        root: the directory under which ``<job_id>/<worker>`` is created as the working directory.
        on_output: receives the output in batches of at most ``batch_lines`` lines, delivered at
            the latest ``batch_interval_s`` seconds after the first line of the batch was read.
            Its errors are logged and do not affect the process.
        base_env: the environment to start from (default: the agent's ``os.environ``).
        job_env: the job's own variables; they cannot override the agent's reserved keys.
        max_runtime_s: seconds after start after which the process is stopped and its outcome is
            ``timed_out`` (None: no limit).
        timeout_grace_s: seconds between SIGTERM and SIGKILL when the maximum runtime is reached.
        batch_interval_s: the longest a read line waits before it is handed to ``on_output`` (seconds).
        batch_lines: the most lines in one batch.
        drain_s: how long, after the process group is gone, to wait for the output pipes to close
            (seconds); a process that left the group may hold them open.

    Raises:
        ValueError: an empty command, a ``job_id`` that is not a safe directory name, or a
            non-positive batch size or interval.
    """

    def __init__(
        self,
        *,
        job_id: str,
        allocation_id: str,
        placement: WorkerPlacement,
        command: Sequence[str],
        root: Path,
        on_output: OutputCallback,
        base_env: Mapping[str, str] | None = None,
        job_env: Mapping[str, str] | None = None,
        max_runtime_s: float | None = None,
        timeout_grace_s: float = 10.0,
        batch_interval_s: float = 0.5,
        batch_lines: int = 100,
        drain_s: float = 2.0,
    ) -> None:
        if not command:
            raise ValueError("the job has no command to run")
        if not _SAFE_NAME.match(job_id) or job_id in {".", ".."}:
            raise ValueError(f"job id {job_id!r} is not a safe directory name")
        if batch_lines <= 0 or batch_interval_s <= 0:
            raise ValueError("batch_lines and batch_interval_s must be positive")
        self.job_id = job_id
        self.placement = placement
        self.command = tuple(command)
        self.workdir = Path(root) / job_id / str(placement.worker)
        self.env = job_environment(
            job_id, allocation_id, placement, os.environ if base_env is None else base_env, job_env or {}
        )
        self._on_output = on_output
        self._max_runtime_s = max_runtime_s
        self._timeout_grace_s = timeout_grace_s
        self._batch_interval_s = batch_interval_s
        self._batch_lines = batch_lines
        self._drain_s = drain_s
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._proc: asyncio.subprocess.Process | None = None
        self._exited: asyncio.Future[int] | None = None
        self._supervisor: asyncio.Task[Exit] | None = None
        self._terminating: asyncio.Task[None] | None = None
        self._cause: Outcome | None = None
        self._reason = ""

    @property
    def pid(self) -> int | None:
        """The process id (also its process group id), or None before :meth:`start`."""
        return None if self._proc is None else self._proc.pid

    async def start(self) -> int:
        """Create the working directory and start the process; returns its pid.

        Raises:
            LaunchError: the command does not exist or is not executable, or the working
                directory cannot be created; the message says which.
            RuntimeError: the process was already started.
        """
        if self._proc is not None:
            raise RuntimeError(f"worker {self.placement.worker} of job {self.job_id} was already started")
        program = self.command[0]
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LaunchError(f"cannot create working directory {self.workdir}: {e.strerror or e}") from e
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command,
                cwd=self.workdir,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=LINE_LIMIT_BYTES,
            )
        except FileNotFoundError as e:
            raise LaunchError(f"cannot start {program!r}: command not found") from e
        except PermissionError as e:
            raise LaunchError(f"cannot start {program!r}: permission denied (not executable)") from e
        except OSError as e:
            raise LaunchError(f"cannot start {program!r}: {e.strerror or e}") from e
        self._proc = proc
        self._exited = asyncio.ensure_future(proc.wait())
        assert proc.stdout is not None and proc.stderr is not None
        pumps = [
            asyncio.create_task(self._pump("stdout", proc.stdout)),
            asyncio.create_task(self._pump("stderr", proc.stderr)),
        ]
        self._supervisor = asyncio.create_task(self._supervise(pumps))
        return proc.pid

    async def wait(self) -> Exit:
        """Wait until the process has ended and its output is delivered; returns how it ended.

        Cancelling the caller does not cancel the supervision. Raises RuntimeError before :meth:`start`.
        """
        if self._supervisor is None:
            raise RuntimeError(f"worker {self.placement.worker} of job {self.job_id} was not started")
        return await asyncio.shield(self._supervisor)

    async def stop(self, reason: str, grace_s: float = 10.0) -> Exit:
        """Stop the whole process group: SIGTERM, then SIGKILL after ``grace_s`` seconds.

        Idempotent: a second call (or one during a timeout's stop) waits for the first. The outcome
        is ``killed`` with ``reason`` in its message, unless the process had already ended (or was
        already being stopped for its maximum runtime). Returns the :class:`Exit`. Raises
        RuntimeError before :meth:`start`.
        """
        if self._proc is None:
            raise RuntimeError(f"worker {self.placement.worker} of job {self.job_id} was not started")
        self._begin_termination("killed", reason, grace_s)
        return await self.wait()

    def _begin_termination(self, cause: Outcome, reason: str, grace_s: float) -> asyncio.Task[None]:
        if self._terminating is None:
            assert self._exited is not None
            if not self._exited.done():
                self._cause, self._reason = cause, reason
            self._terminating = asyncio.create_task(self._terminate(grace_s))
        return self._terminating

    async def _terminate(self, grace_s: float) -> None:
        assert self._exited is not None
        if self._exited.done():
            return
        self._signal_group(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self._exited), grace_s)
        except TimeoutError:
            self._signal_group(signal.SIGKILL)
            await asyncio.shield(self._exited)

    def _signal_group(self, signum: signal.Signals) -> None:
        assert self._proc is not None
        # ProcessLookupError: the group is empty; PermissionError: only zombies are left (macOS).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signum)

    async def _supervise(self, pumps: list[asyncio.Task[None]]) -> Exit:
        assert self._proc is not None and self._exited is not None
        try:
            try:
                await asyncio.wait_for(asyncio.shield(self._exited), self._max_runtime_s)
            except TimeoutError:
                reason = f"maximum runtime of {self._max_runtime_s:g} s reached"
                await asyncio.shield(self._begin_termination("timed_out", reason, self._timeout_grace_s))
            if self._terminating is not None:
                await asyncio.shield(self._terminating)
            self._signal_group(signal.SIGKILL)  # whatever the main process left in its group
            _, pending = await asyncio.wait(pumps, timeout=self._drain_s)
            if pending:
                log.warning("job %s: output pipes still open %g s after exit; closing", self.job_id, self._drain_s)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        return self._result(self._exited.result())

    def _result(self, returncode: int) -> Exit:
        tail = list(self._tail)
        code = returncode if returncode >= 0 else None
        signum = -returncode if returncode < 0 else None
        how = f"exited with code {returncode}" if signum is None else f"was killed by {_signal_name(signum)}"
        if self._cause == "killed":
            return Exit("killed", code, signum, tail, f"stopped ({self._reason}); the process {how}")
        if self._cause == "timed_out":
            return Exit("timed_out", code, signum, tail, f"{self._reason}; the process {how}")
        if returncode == 0:
            return Exit("succeeded", 0, None, tail, "exited with code 0")
        message = f"the process {how}"
        if tail:
            message += "; last stderr lines:\n" + "\n".join(tail)
        return Exit("failed", code, signum, tail, message)

    async def _pump(self, name: str, stream: asyncio.StreamReader) -> None:
        """Read ``stream`` line by line until EOF, handing batches to ``on_output``."""
        loop = asyncio.get_running_loop()
        batch: list[str] = []
        deadline: float | None = None
        read: asyncio.Future[bytes] = asyncio.ensure_future(stream.readline())
        try:
            while True:
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait({read}, timeout=timeout)
                if read in done:
                    try:
                        raw = read.result()
                    except ValueError:  # longer than LINE_LIMIT_BYTES; the line was discarded
                        raw = f"<line longer than {LINE_LIMIT_BYTES} bytes dropped>\n".encode()
                    if not raw:
                        break
                    read = asyncio.ensure_future(stream.readline())
                    line = raw.decode(errors="replace").rstrip("\n").rstrip("\r")
                    batch.append(line)
                    if name == "stderr":
                        self._tail.append(line)
                    if deadline is None:
                        deadline = loop.time() + self._batch_interval_s
                    if len(batch) < self._batch_lines and loop.time() < deadline:
                        continue
                if batch:
                    await self._emit(name, batch)
                    batch = []
                deadline = None
        finally:
            read.cancel()
            if batch:  # EOF, or cancelled while draining: deliver what was read
                await self._emit(name, batch)

    async def _emit(self, name: str, lines: list[str]) -> None:
        try:
            result = self._on_output(name, lines)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("job %s: output callback failed for %d %s line(s)", self.job_id, len(lines), name)
