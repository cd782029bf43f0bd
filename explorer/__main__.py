"""`python -m explorer` runs the command line."""

from __future__ import annotations

from explorer.cli import main

raise SystemExit(main())
