"""Who may do what: principals, roles, permissions, and the one function that decides.

The gateway's guards and the owning services both call :func:`authorize`, so the policy is
written once. Roles (the four of the brief):

- ``platform-admin`` — everything, every tenant (held in the reserved tenant ``_system``);
- ``tenant-admin`` — everything inside its tenant, except platform-wide objects and the
  tenant's own quota (set by the platform);
- ``member`` — submit and manage work, read the tenant's objects; may be bound to one project;
- ``viewer`` — read only; may be bound to one project.

Visibility rule: a principal with no role in a tenant gets *not found* for anything in it
(a 404, never a 403, so the existence of other tenants' objects does not leak); a principal with
a role there but not the permission gets *forbidden* (403).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

import msgspec

Role = Literal["platform-admin", "tenant-admin", "member", "viewer"]
ROLES: tuple[Role, ...] = ("platform-admin", "tenant-admin", "member", "viewer")
PLATFORM_TENANT = "_system"


class Permission(StrEnum):
    """What an operation needs."""

    PLATFORM_ADMIN = "platform.admin"  # tenants, clusters, priority classes, tenant quotas
    TENANT_READ = "tenant.read"  # see the tenant, its projects, quotas
    TENANT_ADMIN = "tenant.admin"  # projects, users, roles, any key, project quotas
    PROJECT_READ = "project.read"
    PROJECT_WRITE = "project.write"  # submit and manage jobs (scheduler issue)
    SELF = "self"  # one's own keys and profile


class RoleBinding(msgspec.Struct, frozen=True, kw_only=True):
    """A role held in a tenant, optionally narrowed to one project of it."""

    role: Role
    tenant: str
    project: str | None = None


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """An authenticated user or service account, as the tenancy service vouches for it."""

    id: str
    tenant: str
    name: str
    kind: Literal["user", "service_account"]
    roles: tuple[RoleBinding, ...] = ()
    key_id: str | None = None

    @property
    def is_platform_admin(self) -> bool:
        """Holds ``platform-admin`` in the platform's own tenant (a binding anywhere else counts for nothing)."""
        return self.tenant == PLATFORM_TENANT and any(
            b.role == "platform-admin" and b.tenant == PLATFORM_TENANT for b in self.roles
        )


_GRANTS: dict[Role, frozenset[Permission]] = {
    "platform-admin": frozenset(Permission),
    "tenant-admin": frozenset(
        {
            Permission.TENANT_READ,
            Permission.TENANT_ADMIN,
            Permission.PROJECT_READ,
            Permission.PROJECT_WRITE,
            Permission.SELF,
        }
    ),
    "member": frozenset({Permission.TENANT_READ, Permission.PROJECT_READ, Permission.PROJECT_WRITE, Permission.SELF}),
    "viewer": frozenset({Permission.TENANT_READ, Permission.PROJECT_READ, Permission.SELF}),
}
_PROJECT_SCOPED = frozenset({Permission.PROJECT_READ, Permission.PROJECT_WRITE})


class Decision(StrEnum):
    """The outcome of :func:`authorize`."""

    ALLOW = "allow"
    FORBIDDEN = "forbidden"  # has a role in the tenant, not this permission: 403
    NOT_FOUND = "not-found"  # no role in the tenant: 404


def authorize(
    principal: Principal, permission: Permission, tenant: str | None = None, project: str | None = None
) -> Decision:
    """Decide whether ``principal`` may use ``permission`` on ``tenant`` (and ``project``).

    A project-bound role counts only for project permissions on that project, and makes the
    tenant visible (``TENANT_READ``) but not its other projects.
    """
    if principal.is_platform_admin:
        return Decision.ALLOW
    if permission == Permission.PLATFORM_ADMIN:
        return Decision.FORBIDDEN
    bindings = [b for b in principal.roles if b.tenant == tenant]
    if not bindings:
        return Decision.NOT_FOUND
    for b in bindings:
        if permission not in _GRANTS[b.role]:
            continue
        if b.project is None or (permission in _PROJECT_SCOPED and project == b.project):
            return Decision.ALLOW
        if b.project is not None and permission in (Permission.TENANT_READ, Permission.SELF):
            return Decision.ALLOW
    if (
        project is not None
        and permission in _PROJECT_SCOPED
        and all(b.project not in (None, project) for b in bindings)
    ):
        return Decision.NOT_FOUND  # bound to other projects only: this one is invisible
    return Decision.FORBIDDEN
