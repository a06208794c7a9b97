"""Node agent: runs on every GPU host (issue 5; not built yet)."""
