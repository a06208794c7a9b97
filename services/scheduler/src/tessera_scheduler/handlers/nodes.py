"""Nodes: the platform's inventory as the scheduler sees it (platform admins)."""

from __future__ import annotations

from tessera_contracts.api import scheduler as api
from tessera_contracts.api.common import Page
from tessera_contracts.rbac import PLATFORM_TENANT, Permission
from tessera_runtime.rpc import Call, allow
from tessera_scheduler import reads
from tessera_scheduler.handlers.base import Base, bad_input


class NodeOps(Base):
    """List nodes."""

    async def list_nodes(self, call: Call, body: None) -> Page[api.NodeView]:
        """Every node, by id, with its state and what is allocated on it (``platform.admin``)."""
        allow(call.require_principal(), Permission.PLATFORM_ADMIN, PLATFORM_TENANT)
        with bad_input():
            async with reads.scoped(self.pool, PLATFORM_TENANT) as conn:
                rows, cursor = await reads.node_page(conn, call.page)
        return reads.page([reads.node_view(r) for r in rows], cursor)
