"""Standalone benchmarks for Explorer (run with ``python -m benchmarks.<name>``)."""
