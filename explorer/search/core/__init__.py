"""The pipeline core: `SearchPipeline` (pipeline.py) and its stages (query, terms, retrieval, results,
two-pass, always-include, the optional LLM), and the classic cursor tools under the same filters."""
