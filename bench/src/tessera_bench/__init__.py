"""Tessera benchmarks. Every benchmark prints one JSON object."""
