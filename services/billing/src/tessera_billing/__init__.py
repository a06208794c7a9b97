"""Billing service: usage records, rate cards, statements (issue 6; not built yet)."""
