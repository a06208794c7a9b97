"""Tenancy events: tenants, projects, principals and roles, API keys, quotas, clusters, priority classes.

Aggregates and their subjects (``ev.tenancy.<tenant>.<aggregate>.<id>``):

=================  ==========  ==================================================
aggregate          tenant      id
=================  ==========  ==================================================
``tenant``         the tenant  the tenant's slug
``project``        its tenant  the project's slug
``username``       its tenant  a digest of the user name: claims it, unique per tenant
``principal``      its tenant  ``u_<hex>`` (users and service accounts)
``apikey``         its tenant  ``k_<hex>``
``quota``          its tenant  ``tenant`` or ``p-<project slug>``
``cluster``        ``_system`` the cluster's slug
``priorityclass``  ``_system`` the class's slug
=================  ==========  ==================================================

Units: GPU amounts in milli-GPU (1000 = one device); budgets in GPU-hours (``Decimal``).
No event carries an API key: ``ApiKeyIssued`` carries its HMAC-SHA256 digest under the server's
pepper, which is enough to verify a presented key and useless to forge one.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Literal

import msgspec

from tessera_contracts.rbac import Role
from tessera_contracts.registry import Event, event_type

Provider = Literal["on-prem", "aws", "gcp", "azure", "oci", "other"]


@event_type("tessera.tenancy.tenant.created.v1")
class TenantCreated(Event, frozen=True, kw_only=True):
    """A tenant was created. ``tenant`` is its slug; ``display_name`` is free text."""

    tenant: str
    display_name: str


@event_type("tessera.tenancy.project.created.v1")
class ProjectCreated(Event, frozen=True, kw_only=True):
    """A project was created inside a tenant."""

    tenant: str
    project: str
    display_name: str


@event_type("tessera.tenancy.username.claimed.v1")
class UsernameClaimed(Event, frozen=True, kw_only=True):
    """A user name was reserved for a principal (makes names unique per tenant)."""

    tenant: str
    name: str
    principal_id: str


@event_type("tessera.tenancy.principal.created.v1")
class PrincipalCreated(Event, frozen=True, kw_only=True):
    """A user or service account was created."""

    tenant: str
    principal_id: str
    name: str
    kind: Literal["user", "service_account"]


@event_type("tessera.tenancy.principal.role_granted.v1")
class RoleGranted(Event, frozen=True, kw_only=True):
    """A principal was given a role in its tenant, optionally narrowed to one project."""

    tenant: str
    principal_id: str
    role: Role
    project: str | None = None


@event_type("tessera.tenancy.principal.role_revoked.v1")
class RoleRevoked(Event, frozen=True, kw_only=True):
    """A role binding was removed."""

    tenant: str
    principal_id: str
    role: Role
    project: str | None = None


@event_type("tessera.tenancy.apikey.issued.v1")
class ApiKeyIssued(Event, frozen=True, kw_only=True):
    """An API key was issued.

    ``digest`` = HMAC-SHA256(pepper, key), hex; ``prefix`` is the key's first characters, for
    people to recognise it.
    """

    tenant: str
    key_id: str
    principal_id: str
    name: str
    prefix: str
    digest: str
    expires_at: datetime | None = None


@event_type("tessera.tenancy.apikey.revoked.v1")
class ApiKeyRevoked(Event, frozen=True, kw_only=True):
    """An API key was revoked; it is refused from then on."""

    tenant: str
    key_id: str


@event_type("tessera.tenancy.apikey.used.v1")
class ApiKeyUsed(Event, frozen=True, kw_only=True):
    """A key was used (recorded at most once per key per ``USE_RESOLUTION_S`` seconds)."""

    tenant: str
    key_id: str
    at: datetime


class GpuQuota(msgspec.Struct, frozen=True, kw_only=True):
    """Quota for one GPU model, in milli-GPU (Kueue ClusterQueue ``resourceGroups`` semantics).

    ``borrowing_limit_milli``: how much more than nominal may be borrowed from the cohort
    (None = unlimited). ``lending_limit_milli``: how much of the nominal quota others in the
    cohort may borrow (None = all of it).
    """

    gpu_model: str
    nominal_milli: int
    borrowing_limit_milli: int | None = None
    lending_limit_milli: int | None = None


@event_type("tessera.tenancy.quota.set.v1")
class QuotaSet(Event, frozen=True, kw_only=True):
    """The whole quota of a tenant (``project`` None) or of one project, replacing the previous one."""

    tenant: str
    project: str | None = None
    cohort: str | None = None
    gpus: tuple[GpuQuota, ...] = ()
    monthly_gpu_hour_budget: Decimal | None = None
    max_concurrent_jobs: int | None = None
    fair_share_weight: int = 1
    """The tenant's weight in fair share (dominant share is divided by it); ignored on project quotas."""


@event_type("tessera.tenancy.cluster.registered.v1")
class ClusterRegistered(Event, frozen=True, kw_only=True):
    """A cluster joined the platform."""

    cluster: str
    region: str
    provider: Provider


@event_type("tessera.tenancy.cluster.node_pool_defined.v1")
class NodePoolDefined(Event, frozen=True, kw_only=True):
    """A node pool of a cluster was defined or redefined."""

    cluster: str
    pool: str
    gpu_model: str | None = None
    labels: dict[str, str] = {}


@event_type("tessera.tenancy.priorityclass.defined.v1")
class PriorityClassDefined(Event, frozen=True, kw_only=True):
    """A priority class was defined or redefined. Higher ``value`` is scheduled first."""

    name: str
    value: int
    preemptible: bool
    description: str = ""


@event_type("tessera.tenancy.platform.bootstrapped.v1")
class PlatformBootstrapped(Event, frozen=True, kw_only=True):
    """The first platform admin was created (happens once: ``ev.tenancy._system.platform.bootstrap``)."""

    principal_id: str
