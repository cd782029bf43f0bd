"""The README and the docs/ pages are run as tests: what they show is what the program prints.

Every ```console block of README.md and docs/*.md is a terminal session on a copy of sample_vault:
its `$ ` lines are commands, the lines under each one are what it prints. A document is one session,
block after block, as a reader would type it: it starts in a folder holding `sample_vault/` (as the
repository root does) and `cd` carries over to its next blocks. A command may be

    $ explorer ARGS            (also `.venv/bin/explorer`; `NAME=value` before it sets the environment)
    $ explorer ARGS | head -n N
    $ cd FOLDER
    $ echo $?                  (the last command's exit code)

A command's shown output is its stdout, and its stderr too when it exits non-zero. Outputs are
compared line by line exactly, except: a number printed with decimals may differ by one unit of its
last digit (`golden_compare.text_close`, the goldens' tolerance), durations (`2.61 s`, `430 ms`) and
a search's stage timings line are masked, and the temporary folder is written `~/explorer` (a checkout of the repository).

When an output changes on purpose, rewrite the shown outputs and read the diff:

    EXPLORER_DOCS_UPDATE=1 python -m pytest tests/test_readme.py

Also checked here: every relative link of these documents reaches a file (and a heading, for
`#anchor`), every docs page is linked from the README or another linked page, no runnable-looking
example hides outside a console block, and the README stays short (at most 350 lines).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE_VAULT, copy_vault, seed_vectors
from golden_compare import text_close

README = REPO / "README.md"
DOCS = REPO / "docs"
UPDATE = os.environ.get("EXPLORER_DOCS_UPDATE", "") not in ("", "0")
MAX_README_LINES = 350

#: The file times of the copy (2026-01-01 12:00 UTC), as the goldens pin them: a note dated by its file time
#: shows the same date on every machine.
_FILE_TIME = 1_767_268_800

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
_TIMINGS_LINE = re.compile(r"^\d+ ms \(.*\)$")
_DURATION = re.compile(r" *(?<![\w.])\d+(?:\.\d+)? ?(?:ms|s)\b")
_ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")
_HEAD = re.compile(r"^\|\s*head\s+(?:-n\s*)?-?(\d+)$")


def documents() -> list[Path]:
    """README.md and every page under docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


@dataclass
class Command:
    """One `$ ` line of a console block and the output shown under it."""

    line: str
    shown: list[str] = field(default_factory=list)


@dataclass
class Block:
    """One ```console block: where its body starts in the document, and its commands."""

    start: int
    end: int
    commands: list[Command]


def console_blocks(text: str) -> list[Block]:
    """The console blocks of a document, in order (`start`/`end`: the body's character span)."""
    blocks = []
    for m in _FENCE.finditer(text):
        if m.group(1) != "console":
            continue
        commands: list[Command] = []
        for line in m.group(2).splitlines():
            if line.startswith("$ "):
                commands.append(Command(line[2:].strip()))
            elif commands:
                commands[-1].shown.append(line)
            elif line.strip():
                raise AssertionError(f"a console block starts with output, not a `$ ` command: {line!r}")
        blocks.append(Block(m.start(2), m.end(2), commands))
    return blocks


def masked(line: str) -> str:
    """A line with its durations masked (a search's stage timings line as a whole)."""
    if _TIMINGS_LINE.match(line.strip()):
        return "<timings>"
    return _DURATION.sub(" <time>", line)


def line_differences(shown: list[str], printed: list[str]) -> list[str]:
    """Where `printed` differs from `shown` beyond the tolerance (empty: the same)."""
    out = []
    if len(shown) != len(printed):
        out.append(f"{len(shown)} lines shown, {len(printed)} printed")
    for i, (e, a) in enumerate(zip(shown, printed), 1):
        if not text_close(masked(e), masked(a)):
            out.append(f"line {i}:\n    shown   {e!r}\n    printed {a!r}")
    return out


class Session:
    """A reader's terminal: a current folder, the last exit code; runs explorer in this process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cwd = root
        self.code = 0

    def run(self, line: str) -> list[str]:
        """What `line` prints (normalised: the temporary root written as the repository root)."""
        words = shlex.split(line)
        if words == ["echo", "$?"]:
            return [str(self.code)]
        if words[:1] == ["cd"]:
            assert len(words) == 2, f"cd takes one folder: {line!r}"
            target = (self.cwd / words[1]).resolve()
            assert target.is_dir() and (target == self.root or self.root in target.parents), line
            self.cwd = target
            return []
        head = None
        if "|" in words:
            at = words.index("|")
            m = _HEAD.match(" ".join(words[at:]))
            assert m, f"only `| head -n N` may follow a command in a console block: {line!r}"
            head, words = int(m.group(1)), words[:at]
        env = {}
        while words and _ENV_ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        assert words and words[0] in ("explorer", ".venv/bin/explorer"), (
            f"a console block runs explorer, cd and echo $? only: {line!r}"
        )
        code, out, err = self._explorer(words[1:], env)
        self.code = code
        printed = out + (err if code != 0 else "")
        lines = printed.replace(str(self.root), "~/explorer").splitlines()
        return lines[:head] if head is not None else lines

    def _explorer(self, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        from explorer.cli import main

        saved_cwd, saved_env = Path.cwd(), {name: os.environ.get(name) for name in env}
        out, err = io.StringIO(), io.StringIO()
        os.chdir(self.cwd)
        os.environ.update(env)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(argv)
                except SystemExit as exc:  # argparse refuses bad arguments this way
                    code = exc.code if isinstance(exc.code, int) else 2
        finally:
            os.chdir(saved_cwd)
            for name, value in saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def docs_root(tmp_path_factory: pytest.TempPathFactory, sample_index) -> Path:
    """A folder holding an indexed copy of sample_vault (file times pinned, vectors from the shared
    sample index), shared by every document: what a reader has after `make run` indexed it."""
    from explorer.cli import main

    root = tmp_path_factory.mktemp("docs")
    vault = copy_vault(SAMPLE_VAULT, root / "sample_vault")
    for path in vault.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, (_FILE_TIME, _FILE_TIME))
    seed_vectors(vault, sample_index)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["index", str(vault)]) == 0
    return root


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_console_blocks_print_what_they_show(doc: Path, docs_root: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    blocks = console_blocks(text)
    if not blocks:
        pytest.skip("no console block")
    vault = docs_root / "sample_vault"
    state = shutil.copytree(vault / ".explorer", docs_root / f"state-{doc.stem}")  # undone after
    session = Session(docs_root)
    problems: list[str] = []
    pieces, at = [], 0
    try:
        for block in blocks:
            body = []
            for command in block.commands:
                printed = session.run(command.line)
                body += [f"$ {command.line}", *printed]
                problems += [
                    f"{doc.name} `$ {command.line}`: {d}" for d in line_differences(command.shown, printed)
                ]
            pieces += [text[at : block.start], "\n".join(body) + "\n"]
            at = block.end
    finally:
        shutil.rmtree(vault / ".explorer")
        shutil.move(state, vault / ".explorer")
    if UPDATE and problems:
        doc.write_text("".join([*pieces, text[at:]]), encoding="utf-8")
        return
    assert not problems, (
        f"{doc.relative_to(REPO)} no longer shows what the program prints "
        "(intended? EXPLORER_DOCS_UPDATE=1 python -m pytest tests/test_readme.py):\n"
        + "\n".join(problems[:30])
    )


# ---- the documents' shape and links --------------------------------------------------------------

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = _FENCE.sub("", doc.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def _links(doc: Path) -> list[str]:
    """The link targets of a document's prose (code blocks and `code spans` hold examples, not links)."""
    return _LINK.findall(_CODE_SPAN.sub("", _FENCE.sub("", doc.read_text(encoding="utf-8"))))


def test_every_relative_link_reaches_a_file_and_heading() -> None:
    broken = []
    for doc in documents():
        for target in _links(doc):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, obsidian:
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    seen, todo = set(), [README.resolve()]
    while todo:
        doc = todo.pop()
        if doc in seen or not doc.is_file() or doc.suffix != ".md":
            continue
        seen.add(doc)
        for target in _links(doc):
            path = target.partition("#")[0]
            if path and not re.match(r"^[a-z][a-z0-9+.-]*:", path):
                todo.append((doc.parent / path).resolve())
    missing = [str(p.relative_to(REPO)) for p in documents() if p.resolve() not in seen]
    assert not missing, f"not linked from the README or a page it links to: {missing}"


def test_runnable_examples_are_console_blocks() -> None:
    """A `$ explorer` example outside a console block would drift unseen: every one is run."""
    hidden = []
    for doc in documents():
        for m in _FENCE.finditer(doc.read_text(encoding="utf-8")):
            if m.group(1) != "console" and re.search(r"^\$ ", m.group(2), re.M):
                hidden.append(f"{doc.relative_to(REPO)}: a ```{m.group(1)} block with `$ ` commands")
    assert not hidden, "\n".join(hidden)


def test_the_readme_is_read_in_minutes() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move detail into docs/"
    first = README.read_text(encoding="utf-8").split("```", 2)[1]
    assert "make run" in first and "make test" in first  # the two commands come first


def test_the_comparison_masks_times_tolerates_last_digits_and_catches_words() -> None:
    shown = ["  time       2.16 s", " 1. Hamsters  0.1020  [bm25 #11]", "430 ms (terms 1.4, bm25 0.3)"]
    same = ["  time      12.61 s", " 1. Hamsters  0.1021  [bm25 #11]", "1606 ms (terms 0.1, names 1.9)"]
    assert line_differences(shown, same) == []
    assert line_differences(shown, [shown[0], " 1. Hamsters  0.1030  [bm25 #11]", shown[2]])  # two units off
    assert line_differences(shown, [shown[0], " 1. Hamster  0.1020  [bm25 #11]", shown[2]])  # a word
    assert line_differences(shown, [shown[0], " 1. Hamsters  0.1020  [bm25 #12]", shown[2]])  # a rank
    assert line_differences(shown, shown[:2])  # a line missing


def test_console_blocks_are_read_as_commands_and_their_output() -> None:
    text = "intro\n\n```console\n$ cd sample_vault\n$ explorer stats\nnotes 3\n\n$ echo $?\n0\n```\n\n```sh\nmake run\n```\n"
    [block] = console_blocks(text)
    assert [(c.line, c.shown) for c in block.commands] == [
        ("cd sample_vault", []),
        ("explorer stats", ["notes 3", ""]),
        ("echo $?", ["0"]),
    ]
    assert text[block.start : block.end].startswith("$ cd sample_vault")
