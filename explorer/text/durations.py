"""Durations as people read them in a progress line: 42s, 3m05s, 1h12m."""

from __future__ import annotations

__all__ = ["format_eta"]


def format_eta(seconds: float) -> str:
    """A duration as 42s, 3m05s or 1h12m."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
