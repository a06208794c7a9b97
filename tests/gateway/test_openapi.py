"""The OpenAPI 3.1 document at /schema: every route, the bearer scheme, problem+json errors, typed bodies."""

from __future__ import annotations

import json
import re
from typing import Any

from gateway_support import FakeTenancy

# (method, path, operationId, request body schema or None, success status, success schema)
ROUTES = [
    ("get", "/v1/me", "whoami", None, "200", "Principal"),
    ("get", "/v1/tenants", "list_tenants", None, "200", "Page_tessera_contracts.api.tenancy.TenantView_"),
    ("post", "/v1/tenants", "create_tenant", "CreateTenant", "201", "TenantView"),
    ("get", "/v1/tenants/{tenant}", "get_tenant", None, "200", "TenantView"),
    ("get", "/v1/tenants/{tenant}/projects", "list_projects", None, "200", None),
    ("post", "/v1/tenants/{tenant}/projects", "create_project", "CreateProject", "201", "ProjectView"),
    ("get", "/v1/tenants/{tenant}/projects/{project}", "get_project", None, "200", "ProjectView"),
    ("get", "/v1/tenants/{tenant}/users", "list_users", None, "200", None),
    ("post", "/v1/tenants/{tenant}/users", "create_user", "CreateUser", "201", "UserView"),
    ("get", "/v1/tenants/{tenant}/users/{user}", "get_user", None, "200", "UserView"),
    ("post", "/v1/tenants/{tenant}/users/{user}/roles", "grant_role", "RoleGrant", "200", "UserView"),
    ("post", "/v1/tenants/{tenant}/users/{user}/roles/revoke", "revoke_role", "RoleGrant", "200", "UserView"),
    ("get", "/v1/tenants/{tenant}/users/{user}/keys", "list_keys", None, "200", None),
    ("post", "/v1/tenants/{tenant}/users/{user}/keys", "issue_key", "IssueKey", "201", "IssuedKey"),
    ("delete", "/v1/tenants/{tenant}/keys/{key}", "revoke_key", None, "200", "KeyView"),
    ("get", "/v1/tenants/{tenant}/quota", "get_tenant_quota", None, "200", "QuotaView"),
    ("put", "/v1/tenants/{tenant}/quota", "set_tenant_quota", "SetQuota", "200", "QuotaView"),
    ("get", "/v1/tenants/{tenant}/quotas", "list_quotas", None, "200", None),
    ("get", "/v1/tenants/{tenant}/projects/{project}/quota", "get_project_quota", None, "200", "QuotaView"),
    ("put", "/v1/tenants/{tenant}/projects/{project}/quota", "set_project_quota", "SetQuota", "200", "QuotaView"),
    ("get", "/v1/clusters", "list_clusters", None, "200", None),
    ("post", "/v1/clusters", "register_cluster", "RegisterCluster", "201", "ClusterView"),
    ("get", "/v1/clusters/{cluster}", "get_cluster", None, "200", "ClusterView"),
    ("put", "/v1/clusters/{cluster}/node-pools/{pool}", "define_node_pool", "DefineNodePool", "200", "ClusterView"),
    ("get", "/v1/priority-classes", "list_priority_classes", None, "200", None),
    ("put", "/v1/priority-classes/{name}", "define_priority_class", "DefinePriorityClass", "200", "PriorityClassView"),
    ("post", "/v1/tenants/{tenant}/projects/{project}/jobs", "submit_job", "SubmitJob", "201", "JobView"),
    ("get", "/v1/tenants/{tenant}/jobs", "list_jobs", None, "200", None),
    ("get", "/v1/tenants/{tenant}/jobs/{job}", "get_job", None, "200", "JobView"),
    ("post", "/v1/tenants/{tenant}/jobs/{job}/cancel", "cancel_job", "CancelJob", "200", "JobView"),
    ("get", "/v1/tenants/{tenant}/jobs/{job}/explain", "explain_job", None, "200", "ExplainView"),
    ("get", "/v1/nodes", "list_nodes", None, "200", None),
]


def _ref(content: dict[str, Any], media_type: str) -> str:
    return content[media_type]["schema"]["$ref"].removeprefix("#/components/schemas/")


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


async def test_openapi_document(client, fake: FakeTenancy):
    r = await client.get("/schema/openapi.json")
    assert r.status_code == 200
    doc = json.loads(r.content)
    assert doc["openapi"].startswith("3.1")
    assert doc["info"]["title"] == "Tessera API"
    schemes = doc["components"]["securitySchemes"]
    assert {"type": "http", "scheme": "bearer"}.items() <= next(iter(schemes.values())).items()
    bearer_name = next(iter(schemes))

    v1 = {(m, p) for p, ops in doc["paths"].items() if p.startswith("/v1") for m in ops}
    assert v1 == {(m, p) for m, p, *_ in ROUTES}, "the document lists exactly the route table"
    for method, path, operation_id, body, status, schema in ROUTES:
        op = doc["paths"][path][method]
        assert op["operationId"] == operation_id
        assert op["security"] == [{bearer_name: []}]
        success = op["responses"][status]
        if schema is not None:
            assert _ref(success["content"], "application/json") == schema, (method, path)
        for error in ("400", "401", "404", "503", "504"):
            assert _ref(op["responses"][error]["content"], "application/problem+json") == "Problem"
        params = {p["name"]: p for p in op.get("parameters", [])}
        for name in (seg[1:-1] for seg in path.split("/") if seg.startswith("{")):
            assert params[name]["in"] == "path" and params[name]["schema"]["pattern"], (path, name)
        if method == "get":
            assert "Idempotency-Key" not in params
            assert "requestBody" not in op
        else:
            assert params["Idempotency-Key"]["in"] == "header"
            assert {"403", "409", "422"} <= set(op["responses"])
        if body is not None:
            assert _ref(op["requestBody"]["content"], "application/json") == body
        if path.endswith("s") and method == "get" and "{" not in path.rsplit("/", 1)[-1]:
            assert {"limit", "after"} <= set(params), path

    assert "security" not in doc["paths"]["/healthz"]["get"]
    schemas = doc["components"]["schemas"]
    assert {"code", "type", "title", "status"} <= set(schemas["Problem"]["properties"])
    for ref in _refs(doc):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


async def test_schema_ui_is_served(client):
    r = await client.get("/schema")
    assert r.status_code == 200
    assert "text/html" in r.headers["content-type"]


async def test_request_bodies_forbid_additional_properties(client, fake: FakeTenancy):
    doc = json.loads((await client.get("/schema/openapi.json")).content)
    schemas = doc["components"]["schemas"]
    nested = {"GpuQuotaBody", "WorkerBody", "SelectorBody"}  # in SetQuota and SubmitJob
    bodies = {body for *_, body, _, _ in ROUTES if body is not None} | nested
    assert bodies <= set(schemas)
    for name in bodies:
        assert schemas[name].get("additionalProperties") is False, name
    views = {schema for *_, schema in ROUTES if schema is not None and not schema.startswith("Page")}
    for name in (*views, "Problem"):
        assert "additionalProperties" not in schemas[name], name


async def test_issue_key_documents_that_the_secret_is_shown_once(client, fake: FakeTenancy):
    doc = json.loads((await client.get("/schema/openapi.json")).content)
    description = doc["paths"]["/v1/tenants/{tenant}/users/{user}/keys"]["post"]["description"]
    assert "shown once" in description
    assert '"secret": null' in description and "Idempotency-Key" in description


async def test_tenant_path_parameter_admits_the_platform_tenant(client, fake: FakeTenancy):
    doc = json.loads((await client.get("/schema/openapi.json")).content)
    for path, ops in doc["paths"].items():
        if "{tenant}" not in path:
            continue
        for op in ops.values():
            (tenant,) = [p for p in op["parameters"] if p["name"] == "tenant"]
            pattern = re.compile(tenant["schema"]["pattern"])
            assert pattern.fullmatch("_system") and pattern.fullmatch("acme"), path
            assert not pattern.fullmatch("_other") and not pattern.fullmatch("Acme"), path
