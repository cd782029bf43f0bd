"""How a memory tool is declared: one method of the memory service, marked with `@tool`, is the tool.

Its name is the tool's name, its signature (types, defaults, `Literal` choices) the input schema a
front end derives (the MCP SDK builds it from the signature), its docstring what an agent reads,
and its body the handler. `@tool` also bounds the size of every string argument before any work,
for every caller (an MCP client, a test, a library user), and fails at import a tool whose string
argument has no bound. Nothing here imports an MCP SDK: a front end turns `ToolSpec` into its own
registration (explorer.cli.mcp).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

#: Most results a search or find may ask for.
MAX_K = 50
#: Most characters a context window may ask for on each side.
MAX_CONTEXT = 20_000
#: Largest note `remember` writes.
MAX_REMEMBER_CHARS = 100_000
#: Longest name-like argument: a path or node_id, a note, a user, a title, a date, a keyword.
MAX_NAME_CHARS = 1_000
#: The longest string each argument may be, checked before any work (items of a list alike). A
#: query is not here (UNBOUNDED): a search reads its first 2,000 characters, why-not refuses a longer one.
ARG_LIMITS = {
    **dict.fromkeys(
        ("target", "note", "user", "title", "after", "before", "on", "mode", "kind", "keywords"),
        MAX_NAME_CHARS,
    ),
    "text": MAX_REMEMBER_CHARS,
}
#: String arguments with no limit in ARG_LIMITS, each bounded by the tool itself.
UNBOUNDED = frozenset({"query"})
#: An argument longer than this is named with its size in an error, never quoted.
QUOTE_CHARS = 200

_F = TypeVar("_F", bound=Callable[..., dict[str, Any]])


class ToolInputError(ValueError):
    """A tool argument is wrong; the message tells the model what to send instead."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a front end needs to offer one tool besides its handler's signature."""

    name: str
    """The tool's name (the method's)."""
    description: str
    """What an agent reads: the method's docstring, dedented."""
    writes: bool
    """True for a tool that writes into the vault (offered only when writing is allowed)."""


def tool(*, writes: bool = False) -> Callable[[_F], _F]:
    """Mark a method of the memory service as a tool; its string arguments are bounded on every call.

    Raises:
        TypeError: at import, when the method has no docstring or a string argument with no bound.
    """

    def mark(fn: _F) -> _F:
        if not fn.__doc__:
            raise TypeError(f"tool {fn.__name__} has no docstring: it is what an agent reads")
        signature = inspect.signature(fn)
        for name, param in signature.parameters.items():
            text = str(param.annotation)
            if ("str" in text or "Literal" in text) and name not in ARG_LIMITS and name not in UNBOUNDED:
                raise TypeError(
                    f"tool {fn.__name__}: give the string argument {name!r} a limit in ARG_LIMITS"
                )

        @functools.wraps(fn)
        def bounded(*args: Any, **kwargs: Any) -> dict[str, Any]:
            check_sizes(arguments(signature, args, kwargs))
            return fn(*args, **kwargs)

        bounded.__tool__ = ToolSpec(fn.__name__, inspect.cleandoc(fn.__doc__), writes)  # type: ignore[attr-defined]
        return bounded  # type: ignore[return-value]

    return mark


def tool_spec(fn: Any) -> ToolSpec | None:
    """The ToolSpec of a method marked with `@tool` (None for any other attribute)."""
    spec = getattr(fn, "__tool__", None)
    return spec if isinstance(spec, ToolSpec) else None


def arguments(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of one call by name (`self` left out; {} when they do not bind)."""
    try:
        named = dict(signature.bind_partial(*args, **kwargs).arguments)
    except TypeError:
        return {}
    named.pop("self", None)
    return named


def check_sizes(named: dict[str, Any]) -> None:
    """ToolInputError, naming the argument and its size, for a string argument (or list item) over
    its limit in ARG_LIMITS."""
    for name, value in named.items():
        limit = ARG_LIMITS.get(name)
        if limit is None:
            continue
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, str) and len(item) > limit:
                what = f"an item of {name}" if isinstance(value, list) else name
                raise ToolInputError(f"{what} is {len(item):,} characters; the limit is {limit:,}")


def sized(message: str, named: dict[str, Any]) -> str:
    """`message` with every long argument it quotes replaced by the argument's name and size, and
    cut to MAX_NAME_CHARS (an agent reads the error, not its own argument back)."""
    for name, value in named.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and len(item) > QUOTE_CHARS:
                shown = f"<{name}: {len(item):,} characters>"
                for quoted in (repr(item), item, " ".join(item.split())):
                    message = message.replace(quoted, shown)
    if len(message) > MAX_NAME_CHARS:
        message = message[:MAX_NAME_CHARS] + f"… (error cut, {len(message):,} characters)"
    return message


def check_int(value: Any, name: str, least: int, most: int) -> None:
    """ToolInputError unless `value` is a whole number from `least` to `most` (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ToolInputError(f"{name} must be a whole number from {least} to {most}, got {value!r}")


def check_k(value: Any, name: str) -> None:
    """ToolInputError unless `value` is a result count from 1 to MAX_K."""
    check_int(value, name, 1, MAX_K)
