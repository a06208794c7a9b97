"""Running a child as an unprivileged system user when this process is root.

Some servers (Postgres) refuse to run as root. In containers and CI, where we often are root,
they run as a system user instead; the helpers here create that user and give it access to the
files it needs, changing only what is missing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tessera_runtime.devstack.process import StackError

__all__ = ["chown_tree", "ensure_traversable", "ensure_tree_readable", "run_as", "system_user"]

_log = logging.getLogger(__name__)


def system_user(name: str, why: str) -> pwd.struct_passwd | None:
    """Return the OS user to run a server as: None unless root, else ``name`` (created if missing).

    The user is a system user without home directory or login shell. ``why`` names the server
    for the error message.

    Raises:
        StackError: the user is missing and ``useradd`` failed.
    """
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    result = subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return pwd.getpwnam(name)  # also fine if a concurrent useradd won the race
    except KeyError:
        raise StackError(
            f"running as root, {why} needs an unprivileged user; `useradd {name}` "
            f"failed: {result.stderr.strip() or result.returncode}"
        ) from None


def run_as(user: pwd.struct_passwd | None) -> dict[str, Any]:
    """Keyword arguments for subprocess to run as ``user`` (uid, gid, no extra groups); {} for None."""
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def ensure_traversable(path: Path, who: str) -> None:
    """Give others the search bit (o+x, not read) on every ancestor of ``path`` lacking it.

    ``who`` names the user that needs to reach ``path``, for the log.
    """
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            _log.info("chmod o+x %s so %s can reach %s", parent, who, path)
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def ensure_tree_readable(tree: Path, probes: Iterable[Path], who: str) -> None:
    """Make ``tree`` reachable, readable, and its programs runnable, by others (``who``, for the log).

    Nothing is changed below ``tree`` if every existing path in ``probes`` is already readable and
    searchable by others (the check that saves walking the tree at every start).
    """
    ensure_traversable(tree, who)
    want_dir = stat.S_IROTH | stat.S_IXOTH
    if all(p.stat().st_mode & want_dir == want_dir for p in probes if p.exists()):
        return
    _log.info("making %s readable by %s", tree, who)
    for root, _dirs, files in os.walk(tree):
        root_path = Path(root)
        root_path.chmod(stat.S_IMODE(root_path.stat().st_mode) | stat.S_IRGRP | stat.S_IXGRP | want_dir)
        for name in files:
            file_path = root_path / name
            if file_path.is_symlink():
                continue
            mode = stat.S_IMODE(file_path.stat().st_mode)
            extra = stat.S_IRGRP | stat.S_IROTH
            if mode & stat.S_IXUSR:
                extra |= stat.S_IXGRP | stat.S_IXOTH
            file_path.chmod(mode | extra)


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """Recursively chown ``path`` unless its top already belongs to ``uid``."""
    if path.stat().st_uid == uid:
        return
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(Path(root) / name, uid, gid, follow_symlinks=False)
