"""Indexing: chunk embeddings and the search indexes built from them."""
