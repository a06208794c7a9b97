"""Who is calling: API keys (verify, issue, list, revoke), ``whoami``, and the platform's bootstrap."""

from __future__ import annotations

import contextlib
from datetime import datetime

from tessera_contracts import rpc
from tessera_contracts.api import tenancy as api
from tessera_contracts.api.common import Page
from tessera_contracts.envelope import envelope
from tessera_contracts.events import tenancy as ev
from tessera_contracts.rbac import PLATFORM_TENANT, Permission, Principal, RoleBinding
from tessera_contracts.registry import Event
from tessera_runtime.rpc import Call, RpcError, allow
from tessera_tenancy import domain, keys, reads
from tessera_tenancy.domain import Conflict, NotFound
from tessera_tenancy.handlers.base import SOURCE, Base, Health, History, is_self
from tessera_tenancy.handlers.users import UserOps

USE_RESOLUTION_S = 300.0
"""An API key's ``last_used_at`` is recorded at most this often (seconds), not on every request."""


class IdentityOps(UserOps, Base):
    """Keys, identity and bootstrap."""

    _key_use_recorded: dict[str, float]

    async def health(self, call: Call, body: None) -> Health:
        """Liveness for ``tessera status``."""
        return Health()

    async def whoami(self, call: Call, body: None) -> Principal:
        """The caller as the gateway authenticated it."""
        principal: Principal = call.require_principal()
        return principal

    async def verify_key(self, call: Call, body: api.VerifyKey) -> Principal:
        """Check a presented API key; answer the principal it stands for.

        Raises 401 for a malformed, unknown, revoked or expired key (never echoing the key).
        """
        key_id = keys.key_id_of(body.secret)
        if key_id is None:
            raise RpcError(rpc.UNAUTHENTICATED, "malformed API key")
        async with reads.platform_wide(self.pool) as conn:  # no tenant is known yet
            row = await conn.fetchrow("SELECT * FROM api_keys WHERE key_id = $1", key_id)
            if row is None or not keys.matches(self.pepper, body.secret, row["digest"]):
                raise RpcError(rpc.UNAUTHENTICATED, "unknown API key")
            now = self.clock()
            if row["revoked_at"] is not None:
                raise RpcError(rpc.UNAUTHENTICATED, "API key revoked")
            if row["expires_at"] is not None and row["expires_at"] <= now:
                raise RpcError(rpc.UNAUTHENTICATED, "API key expired")
            user = await conn.fetchrow("SELECT * FROM principals WHERE id = $1", row["principal_id"])
            if user is None:
                raise RpcError(rpc.UNAUTHENTICATED, "the key's user no longer exists")
            roles = await reads.roles_of(conn, [user["id"]])
        await self._record_use(call, row["tenant_id"], key_id, now)
        return Principal(
            id=user["id"],
            tenant=user["tenant_id"],
            name=user["name"],
            kind=user["kind"],
            roles=tuple(roles[user["id"]]),
            key_id=key_id,
        )

    async def _record_use(self, call: Call, tenant: str, key_id: str, now: datetime) -> None:
        last = self._key_use_recorded.get(key_id)
        if last is not None and now.timestamp() - last < USE_RESOLUTION_S:
            return
        self._key_use_recorded[key_id] = now.timestamp()
        ref = domain.key_ref(tenant, key_id)
        env = envelope(
            ev.ApiKeyUsed(tenant=tenant, key_id=key_id, at=now),
            subject=ref.subject,
            source=SOURCE,
            tenant=tenant,
            time=now,
            correlation_id=call.correlation_id,
        )
        await self.log.append(ref.subject, [env], None)

    async def bootstrap(self, call: Call, body: api.Bootstrap) -> api.IssuedKey:
        """Create the first platform admin (in ``_system``) and its key, once.

        Resumable: the first step records which principal the platform admin is; if a crash
        interrupted an earlier bootstrap before its key was issued, this one completes it.

        Raises 409 when the platform admin already has a key, 503 when the read model is too far
        behind the log to tell.
        """
        history, _ = await self.load(domain.BOOTSTRAP_REF)
        if not history:
            candidate = ev.PlatformBootstrapped(principal_id=domain.new_principal_id())
            with contextlib.suppress(Conflict):  # someone else started it: continue theirs
                await self.create(call, domain.BOOTSTRAP_REF, [candidate], "the platform bootstrap")
            history, _ = await self.load(domain.BOOTSTRAP_REF)
        started = history[0][0]
        assert isinstance(started, ev.PlatformBootstrapped)
        admin = started.principal_id
        ref = domain.principal_ref(PLATFORM_TENANT, admin)
        if not await self.exists(ref):
            binding = RoleBinding(role="platform-admin", tenant=PLATFORM_TENANT)
            await self.create_principal(call, PLATFORM_TENANT, admin, body.name, "user", binding)
        # The key check reads the projection: it must have seen every key of _system logged so far,
        # or a bootstrap right after another would miss the first one's key and issue a second.
        last_key = await self.log.last_sequence(domain.key_ref(PLATFORM_TENANT, "x").subject.rsplit(".", 1)[0] + ".>")
        self.visible_or_unavailable(await self.projector.wait_until(last_key, self.visibility_timeout_s))
        async with reads.platform_wide(self.pool) as conn:
            has_key = await conn.fetchval("SELECT EXISTS (SELECT 1 FROM api_keys WHERE principal_id = $1)", admin)
        if has_key:
            raise Conflict("the platform is already bootstrapped; use a platform admin's key")
        return await self.issue(call, PLATFORM_TENANT, admin, "bootstrap", None)

    async def issue_key(self, call: Call, body: api.IssueKey) -> api.IssuedKey:
        """Issue a key for a user (tenant admin, or the user itself). The secret is in this answer only.

        A tenant admin may not mint a key for a platform admin (that would lend it powers it lacks).
        """
        principal = call.require_principal()
        tenant, user = call.scope.get("tenant", ""), call.scope.get("user", "")
        if not is_self(principal, tenant, user):
            allow(principal, Permission.TENANT_ADMIN, tenant)
        if body.expires_at is not None and body.expires_at <= self.clock():
            raise domain.Invalid("expires_at is in the past")
        target = await self.user_view(tenant, user)
        if any(b.role == "platform-admin" for b in target.roles) and not principal.is_platform_admin:
            raise RpcError(rpc.FORBIDDEN, "only a platform admin may issue keys for a platform admin")
        return await self.issue(call, tenant, user, body.name, body.expires_at)

    async def issue(self, call: Call, tenant: str, user: str, name: str, expires_at: datetime | None) -> api.IssuedKey:
        """Issue a key; the answer is built from the event, so the secret is never lost to a lag."""
        key_id, secret = keys.new_key()
        event = ev.ApiKeyIssued(
            tenant=tenant,
            key_id=key_id,
            principal_id=user,
            name=name,
            prefix=secret[: keys.PREFIX_LENGTH],
            digest=keys.digest(self.pepper, secret),
            expires_at=expires_at,
        )
        await self.create(call, domain.key_ref(tenant, key_id), [event], f"key {key_id}")
        view = api.KeyView(
            tenant=tenant,
            key_id=key_id,
            user_id=user,
            name=name,
            prefix=event.prefix,
            created_at=self.clock(),
            expires_at=expires_at,
            revoked_at=None,
            last_used_at=None,
        )
        return api.IssuedKey(key=view, secret=secret)

    async def list_keys(self, call: Call, body: None) -> Page[api.KeyView]:
        """Keys of a user (tenant admin, or the user itself), without secrets. 404 for an unknown user."""
        principal = call.require_principal()
        tenant, user = call.scope.get("tenant", ""), call.scope.get("user", "")
        if not is_self(principal, tenant, user):
            allow(principal, Permission.TENANT_ADMIN, tenant)
        await self.user_view(tenant, user)  # 404 unless the user is this tenant's
        async with reads.scoped(self.pool, tenant) as conn:
            rows, cursor = await reads.page_of(
                conn,
                "SELECT * FROM api_keys WHERE tenant_id = $1 AND principal_id = $2 AND {after}",
                ("key_id",),
                call.page,
                tenant,
                user,
            )
        return reads.page([reads.key_view(r) for r in rows], cursor)

    async def revoke_key(self, call: Call, body: None) -> api.KeyView:
        """Revoke a key (tenant admin, or its owner). Idempotent."""
        principal = call.require_principal()
        tenant, key_id = call.scope.get("tenant", ""), call.scope.get("key", "")
        allow(principal, Permission.TENANT_READ, tenant)

        def decide(history: History) -> list[Event]:
            state = domain.key_state(history)
            if state.issued is None:
                raise NotFound(f"key {key_id} not found")
            if not is_self(principal, tenant, state.issued.principal_id):
                allow(principal, Permission.TENANT_ADMIN, tenant)
            return [] if state.revoked_at is not None else [ev.ApiKeyRevoked(tenant=tenant, key_id=key_id)]

        self.visible_or_unavailable(await self.update(call, domain.key_ref(tenant, key_id), decide))
        async with reads.scoped(self.pool, tenant) as conn:
            row = await conn.fetchrow("SELECT * FROM api_keys WHERE key_id = $1", key_id)
        if row is None:
            raise NotFound(f"key {key_id} not found")
        return reads.key_view(row)
