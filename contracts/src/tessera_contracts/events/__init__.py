"""Every domain's event types. Importing this package registers them all.

One module per domain (``tenancy``, ``scheduler``, ``node``, ``billing``), added by the issue
that builds the domain.
"""

from tessera_contracts.events import scheduler, tenancy

__all__ = ["scheduler", "tenancy"]
