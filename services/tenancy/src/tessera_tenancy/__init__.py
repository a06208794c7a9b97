"""Tenancy service: tenants, projects, users, roles, API keys, quotas, clusters (issue 3; not built yet)."""
