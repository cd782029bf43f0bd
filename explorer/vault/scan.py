"""Find a vault's notes (ignore rules, symlink loops, unreadable folders) and read them safely."""

from __future__ import annotations

import fnmatch
import json
import operator
import os
import re
import stat
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from explorer.config import ALWAYS_IGNORED_DIRS, DEFAULT_IGNORE, VaultSettings
from explorer.vault.model import Note

if TYPE_CHECKING:
    import pathspec

# An ATX heading line (what starts a section), found without parsing the note.
_HEADING_LINE = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)", re.MULTILINE)

# Editor droppings: vim swap and backup files, emacs locks/autosaves, temp files of atomic saves.
_TEMP_FILE = re.compile(
    r"(^\.#)|(^#.*#$)|(~$)|(\.sw[a-p]$)|(\.tmp$)|(\.temp$)|(^4913$)|(\.crdownload$)|(\.part$)"
)


@dataclass(frozen=True, slots=True)
class NoteFile:
    """A candidate note on disk."""

    path: str
    """Vault-relative POSIX path."""
    location: str
    """Absolute path, as a string (a scan lists every note; a `Path` is made only for the ones read)."""
    size: int
    """Bytes."""
    mtime_ns: int
    """Modification time."""

    @property
    def abspath(self) -> Path:
        """Absolute path."""
        return Path(self.location)


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file or folder left out, with the reason a user can act on."""

    path: str
    """Vault-relative POSIX path."""
    reason: str
    """Why it was left out."""


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a scan found."""

    files: tuple[NoteFile, ...]
    """Notes to read, sorted by path."""
    skipped: tuple[Skipped, ...]
    """Folders and files left out for a reason (ignored-by-rule files are not listed)."""
    ignored: tuple[Skipped, ...] = ()
    """What the ignore rules left out: folders (not looked into), and Markdown files an ignore
    rule names (other files are simply not notes)."""


class VaultError(OSError):
    """The vault itself cannot be used (missing, not a folder, unreadable)."""


def check_vault(root: Path) -> Path:
    """Return the vault's absolute path or raise VaultError with a clear message."""
    root = Path(root).expanduser()
    if not root.exists():
        raise VaultError(f"vault not found: {root}")
    if not root.is_dir():
        raise VaultError(f"vault is not a folder: {root}")
    if not os.access(root, os.R_OK | os.X_OK):
        raise VaultError(f"vault folder is not readable: {root}")
    return root.resolve()


#: A folder holding one of these is a vault: Obsidian's settings folder, or Explorer's own index folder.
VAULT_MARKERS: tuple[str, ...] = (".obsidian", ".explorer")


def discover_vault(start: Path) -> Path | None:
    """The nearest of `start` and its parents that holds `.obsidian/` or `.explorer/` (None when none does).

    As git finds its repository: a command run anywhere inside a vault works on that vault.
    """
    try:
        here = Path(os.path.abspath(start))
    except (OSError, ValueError):
        return None
    for folder in (here, *here.parents):
        try:
            if any((folder / marker).is_dir() for marker in VAULT_MARKERS):
                # The home folder or a system folder is never found by itself: it must be named (--force).
                return None if system_root_reason(folder) else folder
        except OSError:
            continue
    return None


#: Folders that are never a vault: the file system root, system folders, the home folder itself
#: (a vault inside one is fine). Opening one needs --force.
SYSTEM_ROOTS: tuple[str, ...] = (
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/media",
    "/mnt",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/Applications",
    "/Library",
    "/System",
    "/Users",
    "/Volumes",
    "/private",
)


def system_root_reason(root: Path) -> str:
    """Why `root` must not be opened as a vault without --force ('' when it may be).

    Indexing `/` or a home folder would read everything below it and write an index into it.
    """
    real = Path(os.path.realpath(root))
    home = Path(os.path.realpath(Path.home()))
    if real == home:
        return f"{real} is your home folder"
    if str(real) in SYSTEM_ROOTS or real == Path(real.anchor):
        return f"{real} is a system folder"
    return ""


def escapes_vault(root: Path, path: Path) -> bool:
    """True when `path` with every symlink resolved lies outside `root` (an already resolved vault root)."""
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return True
    return real != root and root not in real.parents


def is_temp_file(name: str) -> bool:
    """True for editor swap, backup and temp files."""
    return bool(_TEMP_FILE.search(name))


def is_note_name(name: str, settings: VaultSettings) -> bool:
    """True for a file name the index reads: Markdown, and PDFs and canvases unless their setting is off."""
    lower = name.lower()
    return (
        lower.endswith(".md")
        or (settings.pdfs and lower.endswith(".pdf"))
        or (settings.canvases and lower.endswith(".canvas"))
    )


def is_ignored(rel: str, settings: VaultSettings, is_dir: bool = False) -> bool:
    """True when a vault-relative path is outside the vault's notes by rule."""
    return ignore_reason(rel, settings, is_dir) is not None


def ignore_reason(rel: str, settings: VaultSettings, is_dir: bool = False) -> str | None:
    """Why a vault-relative path is not read as a note, or None when it is one.

    Reasons: a folder that is never part of a vault (`.obsidian`, `.git`, `.trash`, `.explorer`),
    a hidden file or folder, an editor temp file, not Markdown, or an ignore rule (DEFAULT_IGNORE
    plus `vault.ignore`, gitignore syntax).
    """
    parts = [p for p in rel.split("/") if p and p != "."]  # rel is vault-relative, "/"-separated
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part in ALWAYS_IGNORED_DIRS and (not last or is_dir):
            return f"{part}/ is not part of the notes"
        if part.startswith(".") and (not last or is_dir):
            return "hidden folder"
    name = parts[-1] if parts else rel
    if not is_dir and (name.startswith(".") or is_temp_file(name) or not is_note_name(name, settings)):
        return "not a note"
    spec, patterns = _ignore_spec(tuple(DEFAULT_IGNORE) + tuple(settings.ignore))
    check = spec.check_file("/".join(parts) + ("/" if is_dir else ""))
    if check.include and check.index is not None:
        return f"ignore rule {patterns[check.index]!r}"
    return None


@lru_cache(maxsize=16)
def _file_rules(patterns: tuple[str, ...]) -> Any:
    """A test that is False for a vault-relative file path no ignore rule can match, else None (ask the spec).

    Most files of a vault match no rule; gitignore's negated rules (`!x`) only take matches
    back, so a path that no positive rule's pattern matches is not ignored. One combined
    pattern of the positive rules answers that in one match instead of one per rule.
    """
    spec, _lines = _ignore_spec(patterns)
    try:
        parts = [p.regex.pattern for p in spec.patterns if p.include and p.regex is not None]
        combined = (
            re.compile("|".join(f"(?:{re.sub(r'[(][?]P<[^>]+>', '(', x)})" for x in parts)) if parts else None
        )
    except (AttributeError, re.error):  # another pathspec layout: always ask the spec
        return None
    return combined


def _file_ignore_reason(rel: str, name: str, settings: VaultSettings) -> str | None:
    """`ignore_reason` of a file met by a scan (its folders already passed): the same answers, cheaper."""
    # (No editor temp-file pattern matches a name ending in `.md`, `.pdf` or `.canvas`: `is_temp_file` is not needed here.)
    if name.startswith(".") or not is_note_name(name, settings):
        return "not a note"
    patterns = tuple(DEFAULT_IGNORE) + tuple(settings.ignore)
    combined = _file_rules(patterns)
    if combined is not None and combined.match(rel) is None:
        return None
    return ignore_reason(rel, settings)


@lru_cache(maxsize=16)
def _ignore_spec(patterns: tuple[str, ...]) -> tuple[pathspec.GitIgnoreSpec, tuple[str, ...]]:
    import pathspec  # only a scan needs it, not a command answered by a running process

    lines = tuple(p.strip() for p in patterns if p and p.strip())
    return pathspec.GitIgnoreSpec.from_lines(lines), lines


_entry_name = operator.attrgetter("name")


def scan_vault(root: Path, settings: VaultSettings) -> ScanResult:
    """List the notes under `root`, following symlinked folders once, never looping.

    A symlink (to a file or a folder) is followed only when `settings.follow_symlinks` is on
    and its target is inside the vault, or `settings.follow_external_symlinks` is on; any
    other is listed as skipped with the setting that would change it.
    """
    root = check_vault(root)
    files: list[NoteFile] = []
    skipped: list[Skipped] = []
    ignored: list[Skipped] = []
    seen_dirs: set[tuple[int, int]] = set()

    def walk(directory: Path, rel_dir: str) -> None:
        try:
            st = directory.stat()
        except OSError as exc:
            skipped.append(Skipped(rel_dir or ".", f"folder unreadable: {exc.strerror or exc}"))
            return
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            skipped.append(Skipped(rel_dir, "symlink loop: folder already visited"))
            return
        seen_dirs.add(key)
        try:
            entries = sorted(os.scandir(directory), key=_entry_name)
        except OSError as exc:
            skipped.append(Skipped(rel_dir or ".", f"folder unreadable: {exc.strerror or exc}"))
            return
        for entry in entries:
            name = entry.name
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_link, is_dir = True, False
            reason = (
                ignore_reason(rel, settings, is_dir=True)
                if is_dir
                else _file_ignore_reason(rel, name, settings)
            )
            if reason is not None:
                if is_dir and entry.name != ".explorer":  # the index's own folder is not news
                    ignored.append(Skipped(rel + "/", reason))
                elif not is_dir and reason.startswith("ignore rule"):
                    ignored.append(Skipped(rel, reason))
                continue
            if is_link:
                reason = _symlink_refused(root, Path(entry.path), settings)
                if reason:
                    skipped.append(Skipped(rel, reason))
                    continue
            if is_dir:
                if is_link:
                    linked.append((Path(entry.path), rel))  # after the real folders: their own paths win
                else:
                    walk(Path(entry.path), rel)
                continue
            try:
                fst = entry.stat(follow_symlinks=True)
            except OSError as exc:
                reason = "broken symlink" if is_link else f"unreadable: {exc.strerror or exc}"
                skipped.append(Skipped(rel, reason))
                continue
            if not stat.S_ISREG(fst.st_mode):
                skipped.append(Skipped(rel, "not a regular file"))
                continue
            if name == "context.md":
                files.append(
                    NoteFile(rel, entry.path, *with_sidecar(Path(entry.path), fst.st_size, fst.st_mtime_ns))
                )
            else:
                files.append(NoteFile(rel, entry.path, fst.st_size, fst.st_mtime_ns))

    linked: list[tuple[Path, str]] = []
    walk(root, "")
    while linked:
        walk(*linked.pop(0))
    files.sort(key=lambda f: f.path)
    return ScanResult(tuple(files), tuple(skipped), tuple(ignored))


def _symlink_refused(root: Path, path: Path, settings: VaultSettings) -> str:
    """Why the symlink at `path` is not followed, or ''."""
    if not settings.follow_symlinks:
        return "symlink not followed (setting vault.follow_symlinks)"
    if not settings.follow_external_symlinks and escapes_vault(root, path):
        return "symlink to outside the vault not followed (setting vault.follow_external_symlinks)"
    return ""


def path_refused(root: Path, path: Path, settings: VaultSettings) -> str:
    """Why the vault file at `path` must not be read ('' when it may): a symlink on its way that
    the settings do not follow. Checked again right before reading, as the file may have been
    replaced by a link since the scan."""
    if os.path.realpath(path) == os.path.join(str(root), os.path.relpath(path, root)):
        return ""  # no symlink between the root and the file
    return _symlink_refused(root, path, settings)


def read_text(path: Path, max_bytes: int) -> tuple[str | None, str]:
    """Read a note as text. Returns (text, "") or (None, reason) for binary, non-UTF-8, huge or unreadable files."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            return (
                None,
                f"too large: {size / 1e6:.1f} MB (limit {max_bytes / 1e6:.1f} MB, setting vault.max_note_bytes)",
            )
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except PermissionError:
        return None, "unreadable: permission denied"
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}"
    return readable_text(data, max_bytes)


def readable_text(data: bytes, max_bytes: int) -> tuple[str | None, str]:
    """A note's bytes as text, as `read_text` takes them: (text, "") or (None, reason) for huge,
    binary or non-UTF-8 content."""
    if len(data) > max_bytes:
        return None, f"too large: over {max_bytes / 1e6:.1f} MB (setting vault.max_note_bytes)"
    if b"\x00" in data[:8192]:
        return None, "binary file (contains NUL bytes)"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (invalid byte at offset {exc.start})"
    return text, ""


def source_type_for(rel: str, settings: VaultSettings) -> str:
    """The source type of a vault-relative path, from the configured (glob, type) map."""
    posix = PurePosixPath(rel)
    for pattern, kind in settings.source_types:
        if (
            posix.match(pattern)
            or fnmatch.fnmatchcase(rel, pattern)
            or fnmatch.fnmatchcase("/" + rel, pattern)
        ):
            return kind
    return "note"


def with_sidecar(abspath: Path, size: int, mtime_ns: int) -> tuple[int, int]:
    """(size, mtime_ns) of a note, folded with its turn's `metadata.json` when it has one.

    A turn's metadata is part of its index entry, so an edit of the sidecar alone (even while
    nothing watches the vault) must make the note look changed on the next scan.
    """
    if abspath.name != "context.md":
        return size, mtime_ns
    try:
        st = (abspath.parent / "metadata.json").stat()
    except OSError:
        return size, mtime_ns
    return size + st.st_size, max(mtime_ns, st.st_mtime_ns)


def turn_metadata(abspath: Path) -> dict[str, Any]:
    """A turn's `metadata.json` beside its `context.md` ({} when absent or unreadable)."""
    meta = abspath.parent / "metadata.json"
    if abspath.name != "context.md" or not meta.is_file() or meta.is_symlink():
        return {}  # a symlinked sidecar could point anywhere: not read
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_note(file: NoteFile, settings: VaultSettings) -> tuple[Note | None, str]:
    """Read and parse one note; (None, reason) when it must be skipped.

    A note with far more sections than `MAX_NOTE_SHARDS` allows is cut before parsing
    (at the heading that starts the first section past twice that limit) with the cut recorded
    in its warnings, so a note of 200,000 short sections costs what its indexed part costs.
    """
    from explorer.vault.parse import parse_note  # markdown-it: loaded only when a note is read

    lower = file.path.lower()
    if lower.endswith(".pdf"):
        from explorer.vault.pdf import pdf_note, read_pdf

        pages, reason, problems = read_pdf(file.abspath, settings)
        if pages is None:
            return None, reason
        return pdf_note(file.path, pages, source_type_for(file.path, settings), problems), ""
    text, reason = read_text(file.abspath, settings.max_note_bytes)
    if text is None:
        return None, reason
    kind = source_type_for(file.path, settings)
    if lower.endswith(".canvas"):
        from explorer.vault.canvas import load_canvas

        return load_canvas(file.path, text, kind)
    meta = turn_metadata(file.abspath) if kind == "turn_summary" else {}
    from explorer.vault import shard  # read when used: a test may lower the limit

    limit = shard.MAX_NOTE_SHARDS
    cut = section_cut(text, 2 * limit)
    if cut is None:
        return parse_note(file.path, text, kind, meta), ""
    note = parse_note(file.path, text[:cut], kind, meta)
    sections = len(_HEADING_LINE.findall(text))
    warning = (
        f"truncated: {sections:,} sections; only the first {cut:,} of {len(text):,} characters are indexed "
        f"(the limit of {limit:,} shards per note)"
    )
    return replace(note, warnings=(*note.warnings, warning)), ""


def section_cut(text: str, max_sections: int) -> int | None:
    """Offset of the heading line that starts section number `max_sections + 1`, or None when there are fewer."""
    if max_sections <= 0 or text.count("#") <= max_sections:
        return None
    for i, m in enumerate(_HEADING_LINE.finditer(text)):
        if i == max_sections:
            return m.start()
    return None
