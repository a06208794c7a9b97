"""Gateway: the REST API (``/v1``, OpenAPI 3.1 at ``/schema``) in front of every service.

It owns no tables and no domain logic. Per request it authenticates the bearer key with the
tenancy service, applies coarse guards (tenant visibility, platform-admin routes), validates the
body against the contracts' structs, and forwards a command or query over NATS request/reply to
the owning service, whose answer (a view or an RFC 9457 problem) it returns as-is. Writes honour
``Idempotency-Key``. Start it with ``python -m tessera_gateway --host 127.0.0.1 --port 8080``.
"""
