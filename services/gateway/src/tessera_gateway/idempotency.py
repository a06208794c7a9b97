"""``Idempotency-Key``: a retried write gets the first answer, and the service sees it once.

Answers live in the NATS KV bucket ``TESSERA_IDEMPOTENCY`` (created when missing, entries kept
24 h) under ``sha256(principal id, method, path, header value)``, so two callers, or one caller
on two paths, never share an entry. An entry is first a *claim* (``create()``, which succeeds for
exactly one of concurrent requests), then the answer:

- same key, same body, answer stored: the stored status and body, marked replayed;
- same key, same body, claim still in flight: 409 ``conflict`` with ``Retry-After``;
- same key, different body (in flight or done): 422 ``unprocessable``;
- a 5xx answer is not stored (the claim is released, the client may retry); 2xx and 4xx are.

A claim whose gateway died is taken over after ``pending_ttl_s``. The body's fingerprint is the
SHA-256 of the validated body re-encoded with sorted keys, so formatting and key order do not
matter.
"""

from __future__ import annotations

import contextlib
import hashlib
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


_decoder = msgspec.json.Decoder(_Entry)
_encoder = msgspec.json.Encoder()


def entry_key(principal_id: str, method: str, path: str, header: str) -> str:
    """The KV key for one caller's key on one method and path (hex SHA-256; NUL-separated parts)."""
    return hashlib.sha256("\0".join((principal_id, method.upper(), path, header)).encode()).hexdigest()


def fingerprint(body: msgspec.Struct | None) -> str:
    """SHA-256 of ``body`` encoded with sorted keys (``""`` hashed for no body)."""
    encoded = msgspec.json.encode(body, order="sorted") if body is not None else b""
    return hashlib.sha256(encoded).hexdigest()


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
        revision = claimed
        try:
            answer = await produce()
        except BaseException:
            await self._release(key, revision)
            raise
        if answer.status >= 500:
            await self._release(key, revision)
        else:
            await self._store(key, revision, _Entry(fingerprint=fingerprint, claimed_at=self._clock(), answer=answer))
        return answer, False

    async def _claim(self, key: str, fingerprint: str) -> int | Answer:
        """Our claim's revision, or the stored answer to replay."""
        claim = _encoder.encode(_Entry(fingerprint=fingerprint, claimed_at=self._clock()))
        for _ in range(5):
            try:
                return await self._kv.create(key, claim)
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
            if self._clock() - entry.claimed_at < self._pending_ttl_s:
                raise GatewayProblem(
                    rpc.CONFLICT, f"a request with this {HEADER} is still in progress", retry_after=True
                )
            try:  # the claimer died: take its claim over
                return await self._kv.update(key, claim, last=found.revision)
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
