"""The Textual app (the only package that imports Textual)."""
