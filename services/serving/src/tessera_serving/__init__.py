"""Serving service: model endpoints, replicas, routing (a later issue; not built yet)."""
