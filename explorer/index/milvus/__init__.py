"""The Milvus backend: the rankings of a search served by a Milvus engine (Milvus Lite, Standalone, a cluster).

`MilvusIndex` holds a local `VaultIndex` (it reads, parses and shards the vault, and keeps its vector
cache by content hash, exactly as the local backend does) whose shards are also kept in one Milvus
collection, and whose snapshots ask that collection for the BM25 and vector rankings. Explorer's
own fusion, explanations, two-pass, quality and why-not stay above the interface: a ranking comes
back as (node_id, raw score) pairs like the local one.

The collection (one row per shard, keyed by a hash of vault and node_id): node_id, path, vault,
owner, source type, heading path, tags, modification time, offsets, the shard text, its content
hash, the 384-d vector (with `has_vector`), and `terms` - Explorer's own BM25 tokens, each made a
word the engine's `standard` tokenizer keeps whole (see `engine_terms`) - analysed into a sparse
field by Milvus's BM25 function.

The modules: `engine` (the client, the schema, faults as one line), `index` (`MilvusIndex`: the
writes, borrowed vectors, other vaults' notes), `snapshot` (`MilvusSnapshot`: the rankings) and
`team` (`TeamSnapshot`: several vaults in one search).
"""

from explorer.index.milvus.engine import TOKEN_ENV, BackendError, Engine, engine_terms, public_uri
from explorer.index.milvus.index import MilvusIndex, wait_until
from explorer.index.milvus.snapshot import MilvusSnapshot
from explorer.index.milvus.team import TeamSnapshot

__all__ = [
    "TOKEN_ENV",
    "BackendError",
    "Engine",
    "MilvusIndex",
    "MilvusSnapshot",
    "TeamSnapshot",
    "engine_terms",
    "public_uri",
    "wait_until",
]
