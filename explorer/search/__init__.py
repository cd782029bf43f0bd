"""Answer a query: terms, hybrid retrieval, fusion, quality, two-pass, rerank, schema."""
