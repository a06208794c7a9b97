"""Tenancy decisions: pure functions from current state and a command to the events to append.

No I/O, no clock, no randomness: ``now`` and new ids are passed in. State is folded from an
aggregate's own events (:func:`principal_state`, :func:`key_state`). Errors are the domain's own
(:class:`NotFound`, :class:`Conflict`, :class:`Invalid`); the handlers map them to problems.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from tessera_contracts.api import tenancy as api
from tessera_contracts.events import tenancy as ev
from tessera_contracts.rbac import PLATFORM_TENANT, RoleBinding
from tessera_contracts.registry import Event
from tessera_contracts.subjects import AggregateRef

DOMAIN = "tenancy"


class DomainError(Exception):
    """A command that cannot be carried out as asked."""


class NotFound(DomainError):
    """The object named does not exist."""


class Conflict(DomainError):
    """The command contradicts the current state (a duplicate name, say)."""


class Invalid(DomainError):
    """The command is well-formed but not acceptable (e.g. lending more than the nominal quota)."""


# -- addresses ------------------------------------------------------------------------------------


def new_principal_id() -> str:
    """A fresh principal id, ``u_<16 hex>`` (random: the caller's, not the domain's, nondeterminism)."""
    return f"u_{secrets.token_hex(8)}"


def tenant_ref(tenant: str) -> AggregateRef:
    """``ev.tenancy.<tenant>.tenant.<tenant>``."""
    return AggregateRef(DOMAIN, tenant, "tenant", tenant)


def project_ref(tenant: str, project: str) -> AggregateRef:
    """``ev.tenancy.<tenant>.project.<project>``."""
    return AggregateRef(DOMAIN, tenant, "project", project)


def username_ref(tenant: str, name: str) -> AggregateRef:
    """The claim on a user name: its SHA-256 (first 32 hex digits) keeps dots and ``@`` out of subjects."""
    return AggregateRef(DOMAIN, tenant, "username", hashlib.sha256(name.lower().encode()).hexdigest()[:32])


def principal_ref(tenant: str, principal_id: str) -> AggregateRef:
    """``ev.tenancy.<tenant>.principal.<id>``."""
    return AggregateRef(DOMAIN, tenant, "principal", principal_id)


def key_ref(tenant: str, key_id: str) -> AggregateRef:
    """``ev.tenancy.<tenant>.apikey.<id>``."""
    return AggregateRef(DOMAIN, tenant, "apikey", key_id)


def quota_ref(tenant: str, project: str | None) -> AggregateRef:
    """``ev.tenancy.<tenant>.quota.tenant`` or ``….quota.p-<project>``."""
    return AggregateRef(DOMAIN, tenant, "quota", f"p-{project}" if project else "tenant")


def cluster_ref(cluster: str) -> AggregateRef:
    """``ev.tenancy._system.cluster.<cluster>``."""
    return AggregateRef(DOMAIN, PLATFORM_TENANT, "cluster", cluster)


def priority_class_ref(name: str) -> AggregateRef:
    """``ev.tenancy._system.priorityclass.<name>``."""
    return AggregateRef(DOMAIN, PLATFORM_TENANT, "priorityclass", name)


BOOTSTRAP_REF = AggregateRef(DOMAIN, PLATFORM_TENANT, "platform", "bootstrap")


# -- state folded from events ---------------------------------------------------------------------


@dataclass
class PrincipalState:
    """A principal as its events leave it."""

    exists: bool = False
    id: str = ""
    tenant: str = ""
    name: str = ""
    kind: str = "user"
    created_at: datetime | None = None
    roles: list[RoleBinding] = field(default_factory=list)


def principal_state(events: Iterable[tuple[Event, datetime]]) -> PrincipalState:
    """Fold a principal's events (payload, time) into its state."""
    s = PrincipalState()
    for e, at in events:
        if isinstance(e, ev.PrincipalCreated):
            s = PrincipalState(True, e.principal_id, e.tenant, e.name, e.kind, at, [])
        elif isinstance(e, ev.RoleGranted):
            binding = RoleBinding(role=e.role, tenant=e.tenant, project=e.project)
            if binding not in s.roles:
                s.roles.append(binding)
        elif isinstance(e, ev.RoleRevoked):
            s.roles = [b for b in s.roles if (b.role, b.project) != (e.role, e.project)]
    return s


@dataclass
class KeyState:
    """An API key as its events leave it."""

    issued: ev.ApiKeyIssued | None = None
    created_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None


def key_state(events: Iterable[tuple[Event, datetime]]) -> KeyState:
    """Fold an API key's events (payload, time) into its state."""
    s = KeyState()
    for e, at in events:
        if isinstance(e, ev.ApiKeyIssued):
            s.issued, s.created_at = e, at
        elif isinstance(e, ev.ApiKeyRevoked) and s.revoked_at is None:
            s.revoked_at = at
        elif isinstance(e, ev.ApiKeyUsed):
            s.last_used_at = max(filter(None, (s.last_used_at, e.at)))
    return s


# -- decisions ------------------------------------------------------------------------------------


RoleRule = Callable[["PrincipalState", str, api.RoleGrant], list[Event]]
"""A decision on a principal's roles: :func:`grant` or :func:`revoke`."""


def grant(state: PrincipalState, tenant: str, body: api.RoleGrant) -> list[Event]:
    """Grant a role; granting one already held changes nothing (no event).

    Raises:
        NotFound: no such principal.
    """
    if not state.exists:
        raise NotFound("user not found")
    binding = RoleBinding(role=body.role, tenant=tenant, project=body.project)
    if binding in state.roles:
        return []
    return [ev.RoleGranted(tenant=tenant, principal_id=state.id, role=body.role, project=body.project)]


def revoke(state: PrincipalState, tenant: str, body: api.RoleGrant) -> list[Event]:
    """Revoke a role; revoking one not held changes nothing (no event).

    Raises:
        NotFound: no such principal.
    """
    if not state.exists:
        raise NotFound("user not found")
    binding = RoleBinding(role=body.role, tenant=tenant, project=body.project)
    if binding not in state.roles:
        return []
    return [ev.RoleRevoked(tenant=tenant, principal_id=state.id, role=body.role, project=body.project)]


def check_quota(body: api.SetQuota, tenant_quota: ev.QuotaSet | None, project: str | None) -> None:
    """Validate a quota (Kueue ClusterQueue rules, plus one for projects).

    - a GPU model appears at most once;
    - ``lending_limit_milli`` ≤ ``nominal_milli`` (one cannot lend what one does not have);
    - a project carves from its tenant, it is not a second source of GPUs: the tenant must have
      a quota, and a project's nominal quota of a model ≤ the tenant's nominal of that model;
    - a cohort is the tenant's (its ClusterQueue's), never a project's.

    Raises:
        Invalid: a rule is broken; the message names the model.
    """
    seen: set[str] = set()
    for g in body.gpus:
        if g.gpu_model in seen:
            raise Invalid(f"GPU model {g.gpu_model} is listed twice")
        seen.add(g.gpu_model)
        if g.lending_limit_milli is not None and g.lending_limit_milli > g.nominal_milli:
            raise Invalid(f"{g.gpu_model}: lending limit {g.lending_limit_milli} exceeds nominal {g.nominal_milli}")
    if project is None:
        return
    if body.cohort is not None:
        raise Invalid("a cohort belongs to the tenant's quota, not to a project's: set it without -p/--project")
    if tenant_quota is None:
        raise Invalid("set the tenant's quota before its projects' quotas")
    ceiling = {g.gpu_model: g.nominal_milli for g in tenant_quota.gpus}
    for g in body.gpus:
        limit = ceiling.get(g.gpu_model, 0)
        if g.nominal_milli > limit:
            raise Invalid(f"{g.gpu_model}: project nominal {g.nominal_milli} exceeds the tenant's {limit}")


def check_tenant_covers_projects(body: api.SetQuota, projects: dict[str, dict[str, int]]) -> None:
    """A new tenant quota must still cover each project's nominal quota, model by model.

    ``projects`` maps a project to its nominal milli-GPU per model.

    Raises:
        Invalid: a project would hold more than its tenant; the message names it.
    """
    ceiling = {g.gpu_model: g.nominal_milli for g in body.gpus}
    for project, nominals in sorted(projects.items()):
        for model, nominal in sorted(nominals.items()):
            if nominal > ceiling.get(model, 0):
                raise Invalid(
                    f"{model}: project {project} has nominal {nominal}, more than the new tenant quota's "
                    f"{ceiling.get(model, 0)}; lower the project's quota first"
                )


def quota_event(tenant: str, project: str | None, body: api.SetQuota) -> ev.QuotaSet:
    """The event that replaces a quota."""
    return ev.QuotaSet(
        tenant=tenant,
        project=project,
        cohort=body.cohort,
        gpus=tuple(
            ev.GpuQuota(
                gpu_model=g.gpu_model,
                nominal_milli=g.nominal_milli,
                borrowing_limit_milli=g.borrowing_limit_milli,
                lending_limit_milli=g.lending_limit_milli,
            )
            for g in body.gpus
        ),
        monthly_gpu_hour_budget=(
            None if body.monthly_gpu_hour_budget is None else body.monthly_gpu_hour_budget.quantize(api.BUDGET_QUANTUM)
        ),
        max_concurrent_jobs=body.max_concurrent_jobs,
        fair_share_weight=body.fair_share_weight,
    )
