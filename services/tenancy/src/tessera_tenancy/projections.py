"""The tenancy read model (schema ``proj_tenancy``), with row-level security on every tenant-owned table.

Every tenant-owned table (:data:`TENANT_OWNED`) has RLS enabled *and forced* (so even its
owner is filtered) and two policies, each for one role:

- ``tenant_isolation`` for :data:`~tessera_runtime.tenant_rows.APP_ROLE` (request handlers; neither owner nor superuser,
  SELECT only): a row is visible only when ``current_setting('tessera.tenant')`` is its tenant.
  The app role has no way to widen that: ``'*'`` means nothing to its policy.
- ``runtime_all_tenants`` for the role that created the schema (the projector's, in production
  the owner): every row, when the transaction set ``tessera.tenant = '*'`` — the runtime's
  all-tenants scope for projectors and replay (:data:`tessera_runtime.projector.ALL_TENANTS`).

The tenant is set per transaction (``set_config(…, true)``), so a pooled connection never carries
it to the next request. Platform-wide tables (:data:`PLATFORM_WIDE`: clusters, node pools,
priority classes) hold no tenant's data and have no policy. The runtime's ``_checkpoint`` and
``_dead_letters`` are not granted to the app role at all (a dead letter can hold any tenant's data).
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import msgspec

from tessera_contracts import codec
from tessera_contracts.events import tenancy as ev
from tessera_runtime.eventlog import StoredEvent
from tessera_runtime.tenant_rows import isolation_ddl

TENANT_OWNED = ("tenants", "projects", "principals", "role_bindings", "api_keys", "quotas")
PLATFORM_WIDE = ("clusters", "node_pools", "priority_classes")


DDL = isolation_ddl(
    """
CREATE TABLE tenants (
    tenant_id text PRIMARY KEY,
    display_name text NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE TABLE projects (
    tenant_id text NOT NULL,
    project text NOT NULL,
    display_name text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, project)
);
CREATE TABLE principals (
    tenant_id text NOT NULL,
    id text PRIMARY KEY,
    name text NOT NULL,
    kind text NOT NULL,
    created_at timestamptz NOT NULL,
    UNIQUE (tenant_id, name)
);
CREATE TABLE role_bindings (
    tenant_id text NOT NULL,
    principal_id text NOT NULL,
    role text NOT NULL,
    project text NOT NULL DEFAULT '',  -- '' = the whole tenant
    PRIMARY KEY (principal_id, role, project)
);
CREATE TABLE api_keys (
    tenant_id text NOT NULL,
    key_id text PRIMARY KEY,
    principal_id text NOT NULL,
    name text NOT NULL,
    prefix text NOT NULL,
    digest text NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz,
    last_used_at timestamptz
);
CREATE INDEX api_keys_principal ON api_keys (tenant_id, principal_id);
CREATE TABLE quotas (
    tenant_id text NOT NULL,
    project text NOT NULL DEFAULT '',  -- '' = the tenant's own quota
    cohort text,
    gpus jsonb NOT NULL,
    monthly_gpu_hour_budget numeric,
    max_concurrent_jobs integer,
    fair_share_weight integer NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, project)
);
CREATE TABLE clusters (
    cluster text PRIMARY KEY,
    region text NOT NULL,
    provider text NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE TABLE node_pools (
    cluster text NOT NULL,
    pool text NOT NULL,
    gpu_model text,
    labels jsonb NOT NULL,
    PRIMARY KEY (cluster, pool)
);
CREATE TABLE priority_classes (
    name text PRIMARY KEY,
    value integer NOT NULL,
    preemptible boolean NOT NULL,
    description text NOT NULL
);
""",
    TENANT_OWNED,
)

_json = msgspec.json.Encoder()


async def _apply_one(conn: asyncpg.Connection, e: StoredEvent) -> None:
    data = codec.payload(e.envelope)
    at = e.envelope.time
    match data:
        case ev.TenantCreated():
            await conn.execute("INSERT INTO tenants VALUES ($1, $2, $3)", data.tenant, data.display_name, at)
        case ev.ProjectCreated():
            await conn.execute(
                "INSERT INTO projects VALUES ($1, $2, $3, $4)", data.tenant, data.project, data.display_name, at
            )
        case ev.PrincipalCreated():
            await conn.execute(
                "INSERT INTO principals VALUES ($1, $2, $3, $4, $5)",
                data.tenant,
                data.principal_id,
                data.name,
                data.kind,
                at,
            )
        case ev.RoleGranted():
            await conn.execute(
                "INSERT INTO role_bindings VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                data.tenant,
                data.principal_id,
                data.role,
                data.project or "",
            )
        case ev.RoleRevoked():
            await conn.execute(
                "DELETE FROM role_bindings WHERE principal_id = $1 AND role = $2 AND project = $3",
                data.principal_id,
                data.role,
                data.project or "",
            )
        case ev.ApiKeyIssued():
            await conn.execute(
                "INSERT INTO api_keys VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, NULL)",
                data.tenant,
                data.key_id,
                data.principal_id,
                data.name,
                data.prefix,
                data.digest,
                at,
                data.expires_at,
            )
        case ev.ApiKeyRevoked():
            await conn.execute(
                "UPDATE api_keys SET revoked_at = coalesce(revoked_at, $2) WHERE key_id = $1", data.key_id, at
            )
        case ev.ApiKeyUsed():
            await conn.execute(
                "UPDATE api_keys SET last_used_at = greatest(last_used_at, $2) WHERE key_id = $1", data.key_id, data.at
            )
        case ev.QuotaSet():
            await conn.execute(
                "INSERT INTO quotas (tenant_id, project, cohort, gpus, monthly_gpu_hour_budget, max_concurrent_jobs,"
                " fair_share_weight, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                " ON CONFLICT (tenant_id, project) DO UPDATE SET cohort = $3, gpus = $4, monthly_gpu_hour_budget = $5,"
                " max_concurrent_jobs = $6, fair_share_weight = $7, updated_at = $8",
                data.tenant,
                data.project or "",
                data.cohort,
                _json.encode(data.gpus).decode(),
                data.monthly_gpu_hour_budget,
                data.max_concurrent_jobs,
                data.fair_share_weight,
                at,
            )
        case ev.ClusterRegistered():
            await conn.execute(
                "INSERT INTO clusters VALUES ($1, $2, $3, $4)", data.cluster, data.region, data.provider, at
            )
        case ev.NodePoolDefined():
            await conn.execute(
                "INSERT INTO node_pools VALUES ($1, $2, $3, $4) ON CONFLICT (cluster, pool) DO UPDATE"
                " SET gpu_model = $3, labels = $4",
                data.cluster,
                data.pool,
                data.gpu_model,
                _json.encode(data.labels).decode(),
            )
        case ev.PriorityClassDefined():
            await conn.execute(
                "INSERT INTO priority_classes VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO UPDATE"
                " SET value = $2, preemptible = $3, description = $4",
                data.name,
                data.value,
                data.preemptible,
                data.description,
            )
        case _:
            pass  # UsernameClaimed, PlatformBootstrapped: no read model needs them


class TenancyProjection:
    """Projection ``tenancy``.

    Tenants, projects, principals, role bindings, API keys, quotas, clusters, node pools and
    priority classes.
    """

    name = "tenancy"
    version = 3  # 3: quotas.fair_share_weight
    subjects: tuple[str, ...] = ("ev.tenancy.>",)
    ddl = DDL

    async def apply(self, conn: asyncpg.Connection, events: Sequence[StoredEvent]) -> None:
        """Apply tenancy events in order (one statement each; the volume is small)."""
        for e in events:
            await _apply_one(conn, e)


TENANCY = TenancyProjection()
