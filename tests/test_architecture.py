"""ARCHITECTURE.md quotes the backend interface as code: its signatures are those of explorer/index/backend.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def signatures(source: str) -> dict[str, list[str]]:
    """Class name -> its members as one normalised line each (`def name(args) -> ret`, `name: type`)."""
    out: dict[str, list[str]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef) or node.name not in ("IndexBackend", "Snapshot"):
            continue
        members = []
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                item.body = [ast.Expr(ast.Constant(...))]
                decorators = "".join(f"@{ast.unparse(d)} " for d in item.decorator_list)
                item.decorator_list = []
                members.append(decorators + " ".join(ast.unparse(item).split()))
            elif isinstance(item, ast.AnnAssign):
                members.append(ast.unparse(item))
        out[node.name] = members
    return out


def test_the_interface_in_architecture_md_is_the_code() -> None:
    doc = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.DOTALL)
    quoted = next(b for b in blocks if "class IndexBackend(Protocol):" in b)
    code = signatures((REPO / "explorer" / "index" / "backend.py").read_text(encoding="utf-8"))
    assert set(code) == {"IndexBackend", "Snapshot"}
    assert signatures(quoted) == code
