"""Gateway: the REST API in front of every service; owns no tables (issue 3; not built yet)."""
