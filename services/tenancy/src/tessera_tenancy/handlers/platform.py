"""Platform-wide objects: clusters with their node pools, and priority classes."""

from __future__ import annotations

from tessera_contracts.api import tenancy as api
from tessera_contracts.api.common import Page
from tessera_contracts.events import tenancy as ev
from tessera_contracts.rbac import PLATFORM_TENANT, Permission
from tessera_contracts.registry import Event
from tessera_runtime.rpc import Call, allow
from tessera_tenancy import domain, reads
from tessera_tenancy.domain import NotFound
from tessera_tenancy.handlers.base import Base, History


class PlatformOps(Base):
    """Clusters, node pools and priority classes: platform admins write, every caller reads."""

    async def register_cluster(self, call: Call, body: api.RegisterCluster) -> api.ClusterView:
        """Register a cluster (platform admin). 409 if the name is taken."""
        allow(call.require_principal(), Permission.PLATFORM_ADMIN)
        event = ev.ClusterRegistered(cluster=body.cluster, region=body.region, provider=body.provider)
        await self.create(call, domain.cluster_ref(body.cluster), [event], f"cluster {body.cluster}")
        return api.ClusterView(
            cluster=body.cluster, region=body.region, provider=body.provider, node_pools=[], created_at=self.clock()
        )

    async def list_clusters(self, call: Call, body: None) -> Page[api.ClusterView]:
        """Every cluster (any authenticated caller: work is submitted to them)."""
        call.require_principal()
        async with reads.scoped(self.pool, PLATFORM_TENANT) as conn:
            rows, cursor = await reads.page_of(conn, "SELECT * FROM clusters WHERE {after}", ("cluster",), call.page)
            return reads.page(await reads.clusters(conn, rows), cursor)

    async def get_cluster(self, call: Call, body: None) -> api.ClusterView:
        """One cluster with its node pools."""
        call.require_principal()
        return await self._cluster(call.scope.get("cluster", ""))

    async def _cluster(self, cluster: str) -> api.ClusterView:
        async with reads.scoped(self.pool, PLATFORM_TENANT) as conn:
            rows = await conn.fetch("SELECT * FROM clusters WHERE cluster = $1", cluster)
            if not rows:
                raise NotFound(f"cluster {cluster} not found")
            return (await reads.clusters(conn, rows))[0]

    async def define_node_pool(self, call: Call, body: api.DefineNodePool) -> api.ClusterView:
        """Define or redefine a node pool of a cluster (platform admin)."""
        allow(call.require_principal(), Permission.PLATFORM_ADMIN)
        cluster, pool = call.scope.get("cluster", ""), call.scope.get("pool", "")
        ref = domain.cluster_ref(cluster)
        event = ev.NodePoolDefined(cluster=cluster, pool=pool, gpu_model=body.gpu_model, labels=dict(body.labels))

        def decide(history: History) -> list[Event]:
            if not history:
                raise NotFound(f"cluster {cluster} not found")
            return [event]

        self.visible_or_unavailable(await self.update(call, ref, decide))
        return await self._cluster(cluster)

    async def define_priority_class(self, call: Call, body: api.DefinePriorityClass) -> api.PriorityClassView:
        """Define or redefine a priority class (platform admin)."""
        allow(call.require_principal(), Permission.PLATFORM_ADMIN)
        name = call.scope.get("name", "")
        event = ev.PriorityClassDefined(
            name=name, value=body.value, preemptible=body.preemptible, description=body.description
        )
        await self.update(call, domain.priority_class_ref(name), lambda history: [event])
        return api.PriorityClassView(
            name=name, value=body.value, preemptible=body.preemptible, description=body.description
        )

    async def list_priority_classes(self, call: Call, body: None) -> Page[api.PriorityClassView]:
        """Every priority class, by name."""
        call.require_principal()
        async with reads.scoped(self.pool, PLATFORM_TENANT) as conn:
            rows, cursor = await reads.page_of(
                conn, "SELECT * FROM priority_classes WHERE {after}", ("name",), call.page
            )
        return reads.page(
            [
                api.PriorityClassView(
                    name=r["name"], value=r["value"], preemptible=r["preemptible"], description=r["description"]
                )
                for r in rows
            ],
            cursor,
        )
