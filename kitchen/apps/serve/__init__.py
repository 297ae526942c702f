"""`kitchen serve`: the Tinker API in front of any kitchen backend, for unmodified `tinker` SDK programs.

Needs the `serve` extra (FastAPI, uvicorn and the `tinker` package, whose message definitions are
the protocol's schema). Modules: `wire` (bodies in and out), `futures` (request ids, long polls,
seq_id order), `records` (what survives a restart), `catalog` (the models file), `keys` (API
keys), `service` (the API's semantics on kitchen's ports), `app` (the FastAPI routes),
`server` (settings and uvicorn).
"""
