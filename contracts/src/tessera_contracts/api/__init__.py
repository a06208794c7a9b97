"""The public API's shapes: request bodies (validated, with limits) and the views returned.

The gateway validates HTTP bodies against these structs and publishes them in its OpenAPI
document; the owning services decode the same structs from RPC requests. Path parameters travel
separately, in :attr:`tessera_contracts.rpc.Request.scope`.
"""
