"""``python -m tessera_tenancy``."""

from tessera_tenancy.app import main

main()
