"""Addresses of the aggregates the scheduler reads and writes (see :mod:`tessera_contracts.events.scheduler`)."""

from __future__ import annotations

import os

from tessera_contracts.events.scheduler import LEADER_AGGREGATE, LEADER_ID
from tessera_contracts.subjects import SYSTEM_TENANT, AggregateRef

DOMAIN = "scheduler"
JOB_ID_PATTERN = r"^j_[0-9a-f]{26}$"


def new_job_id() -> str:
    """A fresh job id, ``j_<26 lower-case hex>`` (104 random bits)."""
    return f"j_{os.urandom(13).hex()}"


def job_ref(tenant: str, job_id: str) -> AggregateRef:
    """``ev.scheduler.<tenant>.job.<id>``.

    Raises:
        tessera_contracts.subjects.InvalidSubject: a malformed tenant or job id.
    """
    return AggregateRef(DOMAIN, tenant, "job", job_id)


def node_ref(node: str) -> AggregateRef:
    """``ev.scheduler._system.node.<node>``."""
    return AggregateRef(DOMAIN, SYSTEM_TENANT, "node", node)


LEADER_REF = AggregateRef(DOMAIN, SYSTEM_TENANT, LEADER_AGGREGATE, LEADER_ID)
"""``ev.scheduler._system.leader.scheduler``: the election record."""


def project_ref(tenant: str, project: str) -> AggregateRef:
    """The tenancy service's project aggregate, ``ev.tenancy.<tenant>.project.<project>``."""
    return AggregateRef("tenancy", tenant, "project", project)


def priority_class_ref(name: str) -> AggregateRef:
    """The tenancy service's priority class aggregate, ``ev.tenancy._system.priorityclass.<name>``."""
    return AggregateRef("tenancy", SYSTEM_TENANT, "priorityclass", name)
