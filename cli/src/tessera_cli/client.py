"""The CLI as a client of the gateway: where it is (config), how to call it (HTTP), how it fails.

Address and key come from ``TESSERA_URL`` / ``TESSERA_API_KEY`` when set (each on its own), else
from the config file that ``tessera login`` writes: ``$TESSERA_CONFIG``, else
``$XDG_CONFIG_HOME/tessera/config.json`` (``~/.config/tessera/config.json``), mode 0600.

Every POST/PUT/DELETE carries an ``Idempotency-Key`` (a uuid4, one per command): a request that
failed on the way (connection error, 429, 502, 503, 504) is retried up to :data:`RETRIES` times
with backoff and the same key, so the gateway applies it at most once. A write answered 409 with
``Retry-After`` (the gateway still has the first attempt with that key in progress, e.g. after a
504) is retried the same way: once the first attempt is answered, the retry gets its answer.

Exit statuses (scripts can rely on them)::

    0  ok
    1  any other error
    2  usage: bad arguments or option values
    3  unauthenticated or forbidden (401, 403; no key configured)
    4  not found (404, 410)
    5  conflict (409, 422)
    6  unavailable: 429, 502, 503, 504, a timeout, or the gateway cannot be reached

A failure prints one line to stderr: ``tessera: error: <detail> (<code>)``, where ``detail`` is
the problem's ``detail`` (or ``title``) and ``code`` its stable ``code`` (or the HTTP status).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    import httpx  # imported where used: it costs ~0.4 s, which every `tessera` command would pay

OK, ERROR, USAGE, AUTH, NOT_FOUND, CONFLICT, UNAVAILABLE = 0, 1, 2, 3, 4, 5, 6

EXIT_CODES_EPILOG = """\
exit statuses: 0 ok; 1 other error; 2 usage; 3 unauthenticated or forbidden (401/403);
4 not found (404); 5 conflict (409/422); 6 unavailable or timeout (429/502/503/504, gateway
unreachable). A failure prints one line: "tessera: error: <detail> (<code>)".
"""

DEFAULT_URL = "http://127.0.0.1:8080"
RETRIES = 3
"""Retries after the first attempt, for connection errors and 429/502/503/504."""
RETRY_STATUSES = frozenset({429, 502, 503, 504})
MAX_RETRY_WAIT_S = 5.0
PAGE_SIZE = 100
"""Items asked for per page when following ``next`` (the gateway allows up to 500)."""


# -- errors ---------------------------------------------------------------------------------------


class CliFailure(Exception):
    """A failure reported as one line and the exit status ``exit_code``."""

    def __init__(self, message: str, exit_code: int = ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UsageError(CliFailure):
    """A bad option value found after parsing (exit status 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, USAGE)


def exit_code_for_status(status: int) -> int:
    """The exit status for an HTTP (or problem) status."""
    if status in (401, 403):
        return AUTH
    if status in (404, 410):
        return NOT_FOUND
    if status in (409, 422):
        return CONFLICT
    if status in RETRY_STATUSES:
        return UNAVAILABLE
    return ERROR


class ApiError(CliFailure):
    """The gateway answered with an error (a problem document, ideally)."""

    def __init__(self, status: int, detail: str, code: str) -> None:
        super().__init__(f"{detail} ({code})", exit_code_for_status(status))
        self.status = status
        self.detail = detail
        self.code = code

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """Build the error from a response: its problem's ``detail``/``title`` and ``code``."""
        problem: Any = None
        with contextlib.suppress(ValueError):
            problem = response.json()
        if not isinstance(problem, dict):
            problem = {}
        detail = str(
            problem.get("detail") or problem.get("title") or f"HTTP {response.status_code} {response.reason_phrase}"
        )
        code = str(problem.get("code") or response.status_code)
        reasons = _field_errors(problem.get("errors"))
        if reasons:
            detail = f"{detail}: {reasons}"
        return cls(response.status_code, " ".join(detail.split()), code)


def _field_errors(errors: Any, most: int = 3) -> str:
    """A problem's ``errors`` list (``[{"key", "message", ...}]``) as ``key: message; ...`` (first ``most``)."""
    if not isinstance(errors, list):
        return ""
    parts = []
    for error in errors[:most]:
        if isinstance(error, dict) and error.get("message"):
            key = error.get("key")
            parts.append(f"{key}: {error['message']}" if key else str(error["message"]))
    if len(errors) > most:
        parts.append(f"and {len(errors) - most} more")
    return "; ".join(parts)


def handles_errors(handler: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], int]:
    """Wrap a command handler: a :class:`CliFailure` becomes its one line and its exit status.

    The handler may be a coroutine function; it is run to completion here.
    """

    @functools.wraps(handler)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            result = handler(args)
            if asyncio.iscoroutine(result):
                result = asyncio.run(result)
            return int(result or 0)
        except CliFailure as exc:
            print(f"tessera: error: {exc}", file=sys.stderr)
            return exc.exit_code

    return wrapper


# -- config ---------------------------------------------------------------------------------------


def config_path() -> Path:
    """Where ``tessera login`` writes: ``$TESSERA_CONFIG`` or the XDG config folder."""
    explicit = os.environ.get("TESSERA_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tessera" / "config.json"


@dataclass(frozen=True)
class Config:
    """The gateway's address and the API key, and where each came from (``env``, ``file``, ``default``)."""

    url: str
    api_key: str | None
    url_source: str
    key_source: str
    path: Path


def read_config_file(path: Path) -> dict[str, Any]:
    """The config file's contents; empty when there is none.

    Raises:
        CliFailure: the file exists but is not a JSON object.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CliFailure(f"cannot read config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise CliFailure(f"cannot read config {path}: not a JSON object")
    return data


def load_config() -> Config:
    """The effective config: environment variables first, then the file, then defaults."""
    path = config_path()
    stored = read_config_file(path)
    env_url, env_key = os.environ.get("TESSERA_URL"), os.environ.get("TESSERA_API_KEY")
    if env_url:
        url, url_source = env_url, "env"
    elif stored.get("url"):
        url, url_source = str(stored["url"]), "file"
    else:
        url, url_source = DEFAULT_URL, "default"
    if env_key:
        key, key_source = env_key, "env"
    elif stored.get("api_key"):
        key, key_source = str(stored["api_key"]), "file"
    else:
        key, key_source = None, "none"
    return Config(url=url.rstrip("/"), api_key=key, url_source=url_source, key_source=key_source, path=path)


def save_config(path: Path, url: str, api_key: str) -> None:
    """Write url and key to ``path`` with mode 0600 (created so, never readable by others)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"url": url.rstrip("/"), "api_key": api_key}, handle, indent=2)
            handle.write("\n")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)


def mask(secret: str | None) -> str:
    """The first 8 characters of a key and an ellipsis; ``-`` when there is none."""
    return f"{secret[:8]}…" if secret else "-"


# -- HTTP -----------------------------------------------------------------------------------------


def path(*segments: str) -> str:
    """``/v1/...`` from segments, each percent-encoded (a name with ``/`` or ``@`` stays one segment)."""
    return "/v1/" + "/".join(quote(s, safe="") for s in segments)


class Api:
    """A gateway client: bearer auth, idempotency keys, retries, errors as :class:`ApiError`."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        *,
        timeout_s: float = 10.0,
        retries: int = RETRIES,
        backoff_s: float = 0.25,
    ) -> None:
        import httpx

        headers = {"Accept": "application/json", "User-Agent": "tessera-cli"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.url = url
        self.retries = retries
        self.backoff_s = backoff_s
        self._http = httpx.Client(base_url=url, headers=headers, timeout=timeout_s)

    @classmethod
    def from_config(cls) -> Api:
        """A client for the configured gateway.

        Raises:
            CliFailure: no API key is configured (exit status 3).
        """
        config = load_config()
        if not config.api_key:
            raise CliFailure(
                "not logged in: run `tessera login --url URL --key KEY` or set TESSERA_URL and TESSERA_API_KEY "
                "(unauthenticated)",
                AUTH,
            )
        return cls(config.url, config.api_key)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, url: str, *, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        """Send one request (retried when that is safe) and return the decoded JSON body (None if empty).

        Raises:
            ApiError: the gateway answered with an error status.
            CliFailure: the gateway could not be reached, after the retries (exit status 6).
        """
        import httpx

        headers = {} if method == "GET" else {"Idempotency-Key": str(uuid.uuid4())}
        response: httpx.Response | None = None
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self._http.request(method, url, json=body, params=params, headers=headers)
            except httpx.TransportError as exc:
                if last:
                    raise CliFailure(
                        f"cannot reach the gateway at {self.url}: {_reason(exc)} (unavailable)", UNAVAILABLE
                    ) from None
                self._sleep(attempt, None)
                continue
            if _retryable(response, headers) and not last:
                self._sleep(attempt, response.headers.get("Retry-After"))
                continue
            break
        assert response is not None
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise CliFailure(f"the gateway answered {method} {url} with a body that is not JSON") from None

    def _sleep(self, attempt: int, retry_after: str | None) -> None:
        wait = self.backoff_s * 2**attempt
        if retry_after is not None:
            with contextlib.suppress(ValueError):
                wait = float(retry_after)
        time.sleep(max(0.0, min(wait, MAX_RETRY_WAIT_S)))

    def get(self, url: str, params: dict[str, Any] | None = None) -> Any:
        """``GET``: the decoded body."""
        return self.request("GET", url, params=params)

    def post(self, url: str, body: Any) -> Any:
        """``POST`` a JSON body (with an Idempotency-Key)."""
        return self.request("POST", url, body=body)

    def put(self, url: str, body: Any) -> Any:
        """``PUT`` a JSON body (with an Idempotency-Key)."""
        return self.request("PUT", url, body=body)

    def delete(self, url: str) -> Any:
        """``DELETE`` (with an Idempotency-Key)."""
        return self.request("DELETE", url)

    def pages(
        self, url: str, *, limit: int | None = None, after: str | None = None, filters: dict[str, str] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Each page of a list, following ``next``; stops once ``limit`` items have been asked for.

        ``filters`` are query parameters sent with every page (httpx would drop a query string
        written into ``url``).
        """
        remaining = limit
        while True:
            size = PAGE_SIZE if remaining is None else min(remaining, 500)
            params: dict[str, Any] = {**(filters or {}), "limit": size}
            if after:
                params["after"] = after
            page = self.get(url, params)
            if not isinstance(page, dict) or not isinstance(page.get("items"), list):
                raise CliFailure(f"the gateway answered GET {url} with something that is not a page")
            yield page
            after = page.get("next")
            if remaining is not None:
                remaining -= len(page["items"])
            if not after or (remaining is not None and remaining <= 0):
                return

    def list_all(
        self, url: str, *, limit: int | None = None, after: str | None = None, filters: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Every item of a list (or the first ``limit``), as one ``{"items": [...], "next": cursor}``.

        ``next`` is the cursor to continue from (``--after``), None when the list is complete;
        ``filters`` are query parameters sent with every page.
        """
        items: list[Any] = []
        cursor: str | None = None
        for page in self.pages(url, limit=limit, after=after, filters=filters):
            items.extend(page["items"])
            cursor = page.get("next")
        if limit is not None and len(items) > limit:
            items = items[:limit]  # a server that sent more than asked: the cursor no longer fits
            cursor = None
        return {"items": items, "next": cursor}


def _retryable(response: httpx.Response, headers: dict[str, str]) -> bool:
    """A status worth retrying: 429/502/503/504, or a write's 409 "in progress" (it has ``Retry-After``)."""
    if response.status_code in RETRY_STATUSES:
        return True
    return response.status_code == 409 and "Idempotency-Key" in headers and "Retry-After" in response.headers


def _reason(exc: httpx.TransportError) -> str:
    import httpx

    if isinstance(exc, httpx.ConnectError):
        text = str(exc).lower()
        return "connection refused" if "refused" in text else f"cannot connect ({exc})"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return str(exc) or type(exc).__name__


# -- argument helpers -----------------------------------------------------------------------------


def positive_int(text: str) -> int:
    """Argparse ``type`` for a count of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def add_read_options(parser: argparse.ArgumentParser) -> None:
    """``--json`` for a read command."""
    parser.add_argument("--json", action="store_true", help="print the gateway's JSON as it is")


def add_list_options(parser: argparse.ArgumentParser) -> None:
    """``--json``, ``--limit N`` and ``--after CURSOR`` for a list command."""
    add_read_options(parser)
    parser.add_argument("--limit", type=positive_int, help="at most N items (default: all, following every page)")
    parser.add_argument("--after", metavar="CURSOR", help="start after this cursor (a 'next' from --json output)")


def add_tenant_option(parser: argparse.ArgumentParser) -> None:
    """The required ``-t/--tenant``."""
    parser.add_argument("-t", "--tenant", required=True, help="the tenant")
