"""The lifecycle shared by the embedded servers: a supervised child process on loopback ports.

:class:`ChildServer` owns what every server does the same way: start (retrying on other free
ports when an auto-picked port was taken), wait for readiness, stop, kill, restart, hand over
(detach), and stop at interpreter exit. A server class supplies only what differs: its command
line, its readiness check, and what to do before the first spawn and after it is ready.
"""

from __future__ import annotations

import abc
import atexit
import logging
import signal
import subprocess
import time
import weakref
from pathlib import Path
from typing import Any, ClassVar

from tessera_runtime.devstack.process import (
    LOOPBACK,
    POLL_S,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    ExitedEarly,
    StackError,
    child_env,
    free_port,
    kill_popen,
    log_tail,
    open_log,
    stop_popen,
)

__all__ = ["ChildServer"]

_log = logging.getLogger(__name__)

_START_ATTEMPTS = 3
"""Spawns per start when a port is auto-picked (a free port may be taken before the server binds)."""


class ChildServer(abc.ABC):
    """A server run as a child process in its own session, listening on 127.0.0.1.

    Ports: the main one (:attr:`port`) and any ``extra_ports`` a subclass names are each either
    given, or ``None`` to pick a free one at the first start and keep it from then on. While a
    start has not yet succeeded, an auto-picked port is picked anew if the process exits during
    start-up (up to three spawns); given ports are never changed.

    While it runs, the server belongs to this object and is stopped at interpreter exit (servers
    with a lower :attr:`EXIT_ORDER` first) unless :meth:`stop`, :meth:`kill` or detaching ended
    that ownership first.

    Args:
        data_dir: the server's directory (logs, configuration, data); made absolute.
        port: the main port, or ``None`` for a free one.
        extra_ports: other ports by name (the name appears in errors), each given or ``None``.
    """

    PROGRAM: ClassVar[str]
    """The executable's name, as in messages and in ``/proc/PID/comm``."""
    LABEL: ClassVar[str]
    """The server's name in errors about it ("NATS", "Postgres")."""
    URL_TEMPLATE: ClassVar[str]
    """:attr:`url` with ``{host}`` and ``{port}`` to fill in."""
    LOG_NAME: ClassVar[str]
    """File name of the stdout/stderr log in :attr:`data_dir`."""
    STOP_SIGNAL: ClassVar[signal.Signals]
    """The polite signal :meth:`stop` sends before SIGKILL."""
    NOT_READY: ClassVar[str] = "did not become ready"
    """How the error says that the readiness check did not pass in time."""
    EXIT_ORDER: ClassVar[int] = 0
    """Servers still owned at exit are stopped in ascending order of this number."""

    def __init__(self, data_dir: Path, port: int | None, extra_ports: dict[str, int | None] | None = None) -> None:
        self.data_dir = Path(data_dir).absolute()
        self._ports: dict[str, int | None] = {"port": port, **(extra_ports or {})}
        self._kept = {name for name, number in self._ports.items() if number is not None}
        self._proc: subprocess.Popen[bytes] | None = None

    # -- properties

    def _port_named(self, name: str) -> int:
        """The port called ``name``. Raises StackError before the first start if it was not given."""
        number = self._ports[name]
        if number is None:
            raise StackError(f"{self.LABEL} has no {name} yet: call start() first")
        return number

    @property
    def port(self) -> int:
        """The main (client) port. Raises StackError before the first start when it was not given."""
        return self._port_named("port")

    @property
    def url(self) -> str:
        """The URL clients use (see the class). Raises StackError before the first start if no port given."""
        return self.URL_TEMPLATE.format(host=LOOPBACK, port=self.port)

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (the real server, not a wrapper); else None."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def log_path(self) -> Path:
        """The server's stdout/stderr log."""
        return self.data_dir / self.LOG_NAME

    # -- what a server supplies

    def _prepare(self) -> None:  # noqa: B027 (optional hook, empty by default)
        """Do what must be done once per start before the first spawn (binaries, directories)."""

    @abc.abstractmethod
    def _command(self) -> list[str]:
        """Return the command line for one spawn; may write files it needs (ports are assigned)."""

    def _popen_options(self) -> dict[str, Any]:
        """Extra keyword arguments for :class:`subprocess.Popen` (working directory, user)."""
        return {"cwd": self.data_dir}

    @abc.abstractmethod
    def _ready(self) -> bool:
        """Whether the server answers on its ports; called repeatedly while it starts."""

    def _after_start(self) -> None:  # noqa: B027 (optional hook, empty by default)
        """Do what needs the running server (create a database); on error the server is stopped."""

    # -- lifecycle

    def start(self) -> str:
        """Start the server and wait until it is ready; returns :attr:`url`.

        Idempotent while running. Waits at most :data:`START_TIMEOUT_S` seconds per spawn for the
        readiness check (what :meth:`_prepare` does before the first spawn is not counted).

        Raises:
            StackError: the server could not be prepared, its process exited during start-up (on
                every try), or it did not become ready in time (the message ends with the log
                tail); or the step after start failed (the server is stopped then).
        """
        if self.pid is not None:
            return self.url
        self._prepare()
        auto = [name for name in self._ports if name not in self._kept]
        attempts = _START_ATTEMPTS if auto else 1
        for attempt in range(1, attempts + 1):
            for name, number in self._ports.items():
                if number is None:
                    self._ports[name] = free_port()
            try:
                self._spawn()
                self._wait_ready()
            except StackError as exc:
                if self._proc is not None:
                    kill_popen(self._proc)
                    self._proc = None
                if attempt == attempts or not isinstance(exc, ExitedEarly):
                    raise
                others = "other free ports" if len(self._ports) > 1 else "another free port"
                _log.info("%s exited on port %s; trying %s", self.PROGRAM, self.port, others)
                for name in auto:
                    self._ports[name] = None
                continue
            break
        self._kept.update(self._ports)
        _OWNED.add(self)
        try:
            self._after_start()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _spawn(self) -> None:
        """Start the process in its own session, its stdout and stderr appended to the log."""
        args = self._command()
        with open_log(self.log_path, f"{self.PROGRAM} on port {self.port}") as log:
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env(),
                start_new_session=True,
                **self._popen_options(),
            )

    def _wait_ready(self) -> None:
        """Poll :meth:`_ready` for up to :data:`START_TIMEOUT_S` seconds.

        Raises:
            ExitedEarly: the process exited meanwhile.
            StackError: it did not become ready in time.
        """
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                raise ExitedEarly(
                    f"{self.PROGRAM} exited with code {self._proc.returncode} during start-up\n"
                    + log_tail(self.log_path)
                )
            if self._ready():
                return
            if time.monotonic() >= deadline:
                raise StackError(
                    f"{self.PROGRAM} {self.NOT_READY} on port {self.port} within "
                    f"{START_TIMEOUT_S:.0f} s\n" + log_tail(self.log_path)
                )
            time.sleep(POLL_S)

    def stop(self) -> None:
        """Stop the server: :attr:`STOP_SIGNAL`, wait :data:`STOP_TIMEOUT_S` seconds, then SIGKILL.

        No-op if stopped.
        """
        if self._proc is not None:
            stop_popen(self._proc, self.STOP_SIGNAL, STOP_TIMEOUT_S)
            self._proc = None

    def kill(self) -> None:
        """SIGKILL the server and its children at once, as a crash would. No-op if stopped."""
        if self._proc is not None:
            kill_popen(self._proc)
            self._proc = None

    def restart(self) -> str:
        """Stop, then start on the same ports and data; returns :attr:`url`.

        Raises:
            StackError: as :meth:`start` (for example a port was taken meanwhile).
        """
        self.stop()
        return self.start()

    def _detach(self) -> subprocess.Popen[bytes]:
        """Hand the running process over to the caller; this object forgets it.

        Raises:
            StackError: the server is not running.
        """
        if self._proc is None:
            raise StackError("not running")
        proc, self._proc = self._proc, None
        _OWNED.discard(self)
        return proc


# Servers owned by objects of this process (not detached): stopped in order at interpreter exit,
# including after Ctrl-C, since their own session shields them from the terminal's SIGINT.
_OWNED: weakref.WeakSet[ChildServer] = weakref.WeakSet()


@atexit.register
def _stop_owned() -> None:
    """Stop every server still owned at exit (by EXIT_ORDER); errors are logged, not raised."""
    for server in sorted(_OWNED, key=lambda server: server.EXIT_ORDER):
        try:
            server.stop()
        except Exception:
            _log.exception("could not stop %r at exit", server)
