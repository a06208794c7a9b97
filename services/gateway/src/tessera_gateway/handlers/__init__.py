"""Route handlers: one module per owning service (``tenancy``), plus ``health``."""
