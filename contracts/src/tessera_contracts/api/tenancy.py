"""Tenancy API: the bodies of commands and the views that queries return.

Bodies have ``forbid_unknown_fields``: a typo is a 400, not a silent no-op.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

import msgspec

from tessera_contracts.api.common import (
    BANNED_CHARACTERS,
    DisplayName,
    GpuModel,
    LabelKey,
    LabelValue,
    Milli,
    Region,
    Slug,
    UserName,
)
from tessera_contracts.events.tenancy import Provider
from tessera_contracts.rbac import Role, RoleBinding

Budget = Annotated[Decimal, msgspec.Meta(description="GPU-hours per calendar month, 0 to 1e9", examples=["1500"])]
MAX_BUDGET = Decimal(1_000_000_000)
BUDGET_DECIMALS = 3  # GPU-hours to the thousandth (3.6 GPU-seconds): Postgres numeric stores it exactly
BUDGET_QUANTUM = Decimal(1).scaleb(-BUDGET_DECIMALS)
MaxJobs = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
FairShareWeight = Annotated[int, msgspec.Meta(ge=1, le=1000, description="weight in fair share between tenants")]
PriorityValue = Annotated[int, msgspec.Meta(ge=-1_000_000_000, le=1_000_000_000)]
Description = Annotated[str, msgspec.Meta(max_length=1000, pattern=rf"^[^{BANNED_CHARACTERS}]*$")]


class Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of request bodies: unknown fields are rejected."""


class CreateTenant(Body, frozen=True, kw_only=True):
    """``POST /v1/tenants``."""

    tenant: Slug
    display_name: DisplayName


class CreateProject(Body, frozen=True, kw_only=True):
    """``POST /v1/tenants/{tenant}/projects``."""

    project: Slug
    display_name: DisplayName


class CreateUser(Body, frozen=True, kw_only=True):
    """``POST /v1/tenants/{tenant}/users``: a user or a service account, with initial roles."""

    name: UserName
    kind: Literal["user", "service_account"] = "user"
    role: Role | None = None
    project: Slug | None = None


class RoleGrant(Body, frozen=True, kw_only=True):
    """``POST /v1/tenants/{tenant}/users/{user}/roles`` (grant) and ``.../roles/revoke``."""

    role: Role
    project: Slug | None = None


class IssueKey(Body, frozen=True, kw_only=True):
    """``POST /v1/tenants/{tenant}/users/{user}/keys``. No ``expires_at``: the key does not expire."""

    name: DisplayName
    expires_at: Annotated[datetime, msgspec.Meta(tz=True)] | None = None


class GpuQuotaBody(Body, frozen=True, kw_only=True):
    """Quota of one GPU model in milli-GPU (see :class:`tessera_contracts.events.tenancy.GpuQuota`)."""

    gpu_model: GpuModel
    nominal_milli: Milli
    borrowing_limit_milli: Milli | None = None
    lending_limit_milli: Milli | None = None


class SetQuota(Body, frozen=True, kw_only=True):
    """``PUT /v1/tenants/{tenant}/quota`` and ``PUT /v1/tenants/{tenant}/projects/{project}/quota``."""

    cohort: Slug | None = None
    gpus: Annotated[list[GpuQuotaBody], msgspec.Meta(max_length=64)] = []
    monthly_gpu_hour_budget: Budget | None = None
    max_concurrent_jobs: MaxJobs | None = None
    fair_share_weight: FairShareWeight = 1

    def __post_init__(self) -> None:
        """Reject NaN, infinite, negative and huge budgets (msgspec has no bounds for Decimal)."""
        budget = self.monthly_gpu_hour_budget
        if budget is None:
            return
        if not (budget.is_finite() and 0 <= budget <= MAX_BUDGET):
            raise ValueError("monthly_gpu_hour_budget must be a number from 0 to 1000000000")
        exponent = budget.as_tuple().exponent
        if isinstance(exponent, int) and exponent < -BUDGET_DECIMALS and budget != budget.quantize(BUDGET_QUANTUM):
            raise ValueError(f"monthly_gpu_hour_budget has at most {BUDGET_DECIMALS} decimal places")


class RegisterCluster(Body, frozen=True, kw_only=True):
    """``POST /v1/clusters``."""

    cluster: Slug
    region: Region
    provider: Provider


class DefineNodePool(Body, frozen=True, kw_only=True):
    """``PUT /v1/clusters/{cluster}/node-pools/{pool}``."""

    gpu_model: GpuModel | None = None
    labels: Annotated[dict[LabelKey, LabelValue], msgspec.Meta(max_length=32)] = {}


class DefinePriorityClass(Body, frozen=True, kw_only=True):
    """``PUT /v1/priority-classes/{name}``."""

    value: PriorityValue
    preemptible: bool = False
    description: Description = ""


class VerifyKey(Body, frozen=True, kw_only=True):
    """Internal (gateway → tenancy): check a presented API key."""

    secret: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class Bootstrap(Body, frozen=True, kw_only=True):
    """Internal (``tessera admin bootstrap``): create the first platform admin and its key."""

    name: UserName = "admin"


# -- views --------------------------------------------------------------------------------------


class TenantView(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant."""

    tenant: str
    display_name: str
    created_at: datetime


class ProjectView(msgspec.Struct, frozen=True, kw_only=True):
    """A project."""

    tenant: str
    project: str
    display_name: str
    created_at: datetime


class UserView(msgspec.Struct, frozen=True, kw_only=True):
    """A user or service account with its role bindings."""

    tenant: str
    id: str
    name: str
    kind: Literal["user", "service_account"]
    roles: list[RoleBinding]
    created_at: datetime


class KeyView(msgspec.Struct, frozen=True, kw_only=True):
    """An API key, without its secret."""

    tenant: str
    key_id: str
    user_id: str
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


class IssuedKey(msgspec.Struct, frozen=True, kw_only=True):
    """A newly issued key. ``secret`` is shown this once and never stored."""

    key: KeyView
    secret: str


class GpuQuotaView(msgspec.Struct, frozen=True, kw_only=True):
    """Quota of one GPU model, milli-GPU."""

    gpu_model: str
    nominal_milli: int
    borrowing_limit_milli: int | None
    lending_limit_milli: int | None


class QuotaView(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant's (``project`` None) or a project's quota."""

    tenant: str
    project: str | None
    cohort: str | None
    gpus: list[GpuQuotaView]
    monthly_gpu_hour_budget: Decimal | None
    max_concurrent_jobs: int | None
    fair_share_weight: int = 1
    updated_at: datetime


class NodePoolView(msgspec.Struct, frozen=True, kw_only=True):
    """A node pool."""

    pool: str
    gpu_model: str | None
    labels: dict[str, str]


class ClusterView(msgspec.Struct, frozen=True, kw_only=True):
    """A cluster and its node pools."""

    cluster: str
    region: str
    provider: str
    node_pools: list[NodePoolView]
    created_at: datetime


class PriorityClassView(msgspec.Struct, frozen=True, kw_only=True):
    """A priority class."""

    name: str
    value: int
    preemptible: bool
    description: str
