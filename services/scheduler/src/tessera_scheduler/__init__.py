"""Scheduler service: queues, jobs, allocations, quota ledger, fair-share usage (issue 4; not built yet)."""
