"""``python -m tessera_scheduler``."""

from tessera_scheduler.app import main

main()
