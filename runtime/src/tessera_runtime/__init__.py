"""Tessera's shared runtime: event log, projector, replay, service runner, embedded stack, test fixtures."""
