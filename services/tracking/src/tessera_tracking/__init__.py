"""Tracking service: experiments, runs, metrics, logs, artifacts, models (a later issue; not built yet)."""
