"""The local backend: an embedded index of one vault in `<vault>/.explorer/` (SQLite catalogue, memory-mapped
vectors and BM25 arrays), `VaultIndex` (explorer.index.local.vault_index) and its `LocalSnapshot`.

Its parts: `vault_index` (the facade the registry in explorer.engine.build makes), `reader` (the live
tables, copy-on-write snapshots), `writer` and `vector_writer` (change batches, vectors by content hash),
`keeper` and `store/` (the store and its faults), `model_host` and `embed/` (the embedding model),
`lexical` (BM25), `dense` (vectors), `dialog`/`dialog_context` (conversation turns), `classic` and
`positions` (the classic cursor tools).
"""
