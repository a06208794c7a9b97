"""``python -m tessera_gateway --host 127.0.0.1 --port 8080`` (see :func:`tessera_gateway.app.main`)."""

from tessera_gateway.app import main

main()
