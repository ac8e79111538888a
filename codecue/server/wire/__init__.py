"""Bytes on the wire: LSP framing (:mod:`~codecue.server.wire.framing`), JSON-RPC decoding with the errors
malformed input is owed (:mod:`~codecue.server.wire.jsonrpc`), the process's stdio as a stream
(:mod:`~codecue.server.wire.stdio`). Pure asyncio and json: the relay uses them without pygls."""
