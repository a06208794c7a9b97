"""``Idempotency-Key``: a retried write gets the first answer, and the service sees it once.

Answers live in the NATS KV bucket ``TESSERA_IDEMPOTENCY`` (created when missing, entries kept
24 h) under ``sha256(principal id, method, path, header value)``, so two callers, or one caller
on two paths, never share an entry. An entry is first a *claim* (``create()``, which succeeds for
exactly one of concurrent requests), then the answer:

- same key, same body, answer stored: the stored status and body, marked replayed;
- same key, same body, claim still in flight: 409 ``conflict`` with ``Retry-After``;
- same key, different body (in flight or done): 422 ``unprocessable``;
- 2xx and 4xx answers are stored; 5xx answers are not:

  - 504 (the service did not answer in time, but may still finish the request) keeps the claim
    until it expires, so a retry in the meantime gets the 409 above (``Retry-After``: the seconds
    until it expires) rather than running the request a second time; the same holds when the
    request is cancelled (client gone) while the service has it;
  - any other 5xx (503: nobody answered, so nothing was done; 500: the service failed) releases
    the claim and the client may retry at once.

A stored answer never holds a secret: a top-level ``"secret"`` of a JSON answer (an issued API
key's) is stored as ``null``, so the first answer is the only one that shows it and a replay has
``"secret": null``. A claim whose gateway died, or that a 504 left, is taken over after
``pending_ttl_s``. The body's fingerprint is the SHA-256 of the validated body re-encoded with
sorted keys, so formatting and key order do not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
from collections.abc import Awaitable, Callable

import msgspec
import nats.errors
import nats.js.errors
from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from tessera_contracts import rpc
from tessera_gateway.problems import GatewayProblem
from tessera_runtime import logs

HEADER = "Idempotency-Key"
HEADER_PATTERN = r"^[\x20-\x7e]{1,255}$"
SECRET_FIELD = "secret"
_JSON_MEDIA_TYPE = "application/json"
_KEEP_CLAIM_STATUSES = frozenset({504})
_STORE_ERRORS = (nats.errors.Error, TimeoutError)
_log = logs.get("idempotency")


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """An HTTP answer as stored: status, body bytes and media type."""

    status: int
    body: bytes
    media_type: str


class _Entry(msgspec.Struct, frozen=True, kw_only=True):
    fingerprint: str
    claimed_at: float
    answer: Answer | None = None
    timed_out: bool = False  # a claim a 504 left: the outcome is unknown until it expires


_decoder = msgspec.json.Decoder(_Entry)
_json_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def entry_key(principal_id: str, method: str, path: str, header: str) -> str:
    """The KV key for one caller's key on one method and path (hex SHA-256; NUL-separated parts)."""
    return hashlib.sha256("\0".join((principal_id, method.upper(), path, header)).encode()).hexdigest()


def without_secret(answer: Answer) -> Answer:
    """``answer`` as it may be stored: a JSON object's top-level ``"secret"`` replaced by ``null``."""
    if answer.media_type != _JSON_MEDIA_TYPE or f'"{SECRET_FIELD}"'.encode() not in answer.body:
        return answer
    try:
        decoded = _json_decoder.decode(answer.body)
    except msgspec.DecodeError:
        return answer
    if not isinstance(decoded, dict) or decoded.get(SECRET_FIELD) is None:
        return answer
    decoded[SECRET_FIELD] = None
    return Answer(status=answer.status, body=_encoder.encode(decoded), media_type=answer.media_type)


def fingerprint(body: msgspec.Struct | None) -> str:
    """SHA-256 of ``body`` encoded with sorted keys (``""`` hashed for no body)."""
    encoded = msgspec.json.encode(body, order="sorted") if body is not None else b""
    return hashlib.sha256(encoded).hexdigest()


def _in_progress(entry: _Entry, left_s: float) -> GatewayProblem:
    """409 for a duplicate of a claim that is still pending (``left_s`` seconds before it expires)."""
    if not entry.timed_out:
        return GatewayProblem(rpc.CONFLICT, f"a request with this {HEADER} is still in progress", retry_after=True)
    wait_s = max(1, math.ceil(left_s))
    return GatewayProblem(
        rpc.CONFLICT,
        f"a request with this {HEADER} is still in progress (it timed out and may yet complete); retry in {wait_s}s",
        headers={"Retry-After": str(wait_s)},
    )


class IdempotencyStore:
    """Claims and answers in a KV bucket (see the module docstring for the rules)."""

    def __init__(self, kv: KeyValue, *, pending_ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self._kv = kv
        self._pending_ttl_s = pending_ttl_s
        self._clock = clock

    @classmethod
    async def open(
        cls, js: JetStreamContext, *, bucket: str, ttl_s: float, pending_ttl_s: float, replicas: int = 1
    ) -> IdempotencyStore:
        """Bind to ``bucket``, creating it (file storage, history 1, ``ttl_s``) when missing."""
        try:
            kv = await js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            config = KeyValueConfig(
                bucket=bucket,
                description="Gateway Idempotency-Key answers",
                history=1,
                ttl=ttl_s,
                storage=StorageType.FILE,
                replicas=replicas,
            )
            kv = await js.create_key_value(config)
        return cls(kv, pending_ttl_s=pending_ttl_s)

    async def run(self, key: str, fingerprint: str, produce: Callable[[], Awaitable[Answer]]) -> tuple[Answer, bool]:
        """The answer for ``key``: the stored one (``replayed`` True) or ``produce()``'s, stored unless 5xx.

        The answer returned is ``produce()``'s own (a secret in it included); the stored copy has
        no secret (:func:`without_secret`).

        Returns:
            ``(answer, replayed)``.

        Raises:
            GatewayProblem: 409 (a duplicate is in flight), 422 (the key was used with another
                body), 503 (the bucket is unreachable).
        """
        try:
            claimed = await self._claim(key, fingerprint)
        except _STORE_ERRORS as exc:
            raise GatewayProblem(rpc.UNAVAILABLE, "the idempotency store is unavailable", retry_after=True) from exc
        if isinstance(claimed, Answer):
            return claimed, True
        revision, claimed_at = claimed
        try:
            answer = await produce()
        except asyncio.CancelledError:
            raise  # the service may have the request: keep the claim until it expires
        except BaseException:
            await self._release(key, revision)
            raise
        if answer.status in _KEEP_CLAIM_STATUSES:
            kept = _Entry(fingerprint=fingerprint, claimed_at=claimed_at, timed_out=True)
            await self._store(key, revision, kept)
        elif answer.status >= 500:
            await self._release(key, revision)
        else:
            stored = _Entry(fingerprint=fingerprint, claimed_at=self._clock(), answer=without_secret(answer))
            await self._store(key, revision, stored)
        return answer, False

    async def _claim(self, key: str, fingerprint: str) -> tuple[int, float] | Answer:
        """Our claim's revision and time, or the stored answer to replay."""
        claimed_at = self._clock()
        claim = _encoder.encode(_Entry(fingerprint=fingerprint, claimed_at=claimed_at))
        for _ in range(5):
            try:
                return await self._kv.create(key, claim), claimed_at
            except nats.js.errors.KeyWrongLastSequenceError:
                pass
            try:
                found = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                continue  # released (or expired) since: claim again
            entry = _decoder.decode(found.value or b"")
            if entry.fingerprint != fingerprint:
                raise GatewayProblem(rpc.UNPROCESSABLE, f"this {HEADER} was already used with a different request body")
            if entry.answer is not None:
                return entry.answer
            left_s = self._pending_ttl_s - (self._clock() - entry.claimed_at)
            if left_s > 0:
                raise _in_progress(entry, left_s)
            try:  # the claimer died, or timed out long enough ago: take its claim over
                return await self._kv.update(key, claim, last=found.revision), claimed_at
            except nats.js.errors.KeyWrongLastSequenceError:
                continue
        raise GatewayProblem(rpc.CONFLICT, f"a request with this {HEADER} is still in progress", retry_after=True)

    async def _store(self, key: str, revision: int, entry: _Entry) -> None:
        try:
            await self._kv.update(key, _encoder.encode(entry), last=revision)
        except (*_STORE_ERRORS, nats.js.errors.KeyWrongLastSequenceError) as exc:
            # The answer still goes out; a retry after the claim expires will run again.
            _log.warning("idempotency.store_failed", key=key, error=repr(exc))

    async def _release(self, key: str, revision: int) -> None:
        with contextlib.suppress(*_STORE_ERRORS, nats.js.errors.KeyWrongLastSequenceError):
            await self._kv.delete(key, last=revision)
