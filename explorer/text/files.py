"""Writing files safely: a temp file in the same folder, flushed to disk, then an atomic rename; and
folders reached from a root with no symbolic link on the way, for writes that must stay inside it."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path, PurePosixPath
from types import TracebackType

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class UnsafePathError(ValueError):
    """A path inside a root passes a symbolic link, or names something that is not a plain folder or file."""


def write_atomic(path: Path, data: str | bytes, mode: int | None = None, *, sync_dir: bool = False) -> None:
    """Replace `path` with `data` so that readers see the old file or the new one, never a part.

    The temp file (`.<name>.<random>.tmp`, a name the vault scanner ignores) is written in the
    same folder, fsynced and renamed over `path`. An existing file keeps its permission bits; a
    file that no longer exists gets `mode` (e.g. the bits it had when it was opened), or else the
    bits a new file gets under the umask, never the temp file's 0600. Text is written as UTF-8
    without newline translation. With `sync_dir`, the folder is fsynced too, so the rename
    itself survives a power cut. On any failure the temp file is removed and the error raised.
    """
    folder = os.open(path.parent, _DIR_FLAGS)
    try:
        _replace(folder, path.name, data, mode, sync_dir=sync_dir, follow=True)
    finally:
        os.close(folder)


def _replace(
    folder: int, name: str, data: str | bytes, mode: int | None, *, sync_dir: bool, follow: bool
) -> None:
    """`write_atomic` in the open folder `folder` (`follow`: an existing link's target gives the mode)."""
    try:
        mode = stat.S_IMODE(os.stat(name, dir_fd=folder, follow_symlinks=follow).st_mode)
    except OSError:
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    while True:
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                0o600,
                dir_fd=folder,
            )
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=folder)
        except OSError:
            pass
        raise
    if sync_dir:
        try:
            os.fsync(folder)
        except OSError:
            pass


def fsync_dir(folder: Path) -> None:
    """Flush a folder entry (a rename in it) to disk, where the platform allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class RealFolder:
    """A folder reached from a root with no symbolic link on the way, held open, so that what is read
    and written in it stays inside the root even if a link appears on the way meanwhile.

    Names given to its methods are single entries of the folder (no `/`, `.` or `..`); an entry
    that is a symbolic link, or not the kind asked for (a folder, a regular file), raises
    UnsafePathError and is neither read nor written through.
    """

    def __init__(self, fd: int, rel: str) -> None:
        self._fd = fd
        self.rel = rel
        """The folder's path relative to the root, POSIX style ('' for the root itself)."""

    def __enter__(self) -> RealFolder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Let go of the folder."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _path(self, name: str) -> str:
        if (
            not name
            or name in (".", "..")
            or "/" in name
            or "\0" in name
            or (os.sep != "/" and os.sep in name)
        ):
            raise UnsafePathError(f"{name!r} is not a single file or folder name")
        return f"{self.rel}/{name}" if self.rel else name

    def names(self) -> list[str]:
        """The entries of the folder."""
        return os.listdir(self._fd)

    def make(self, name: str) -> bool:
        """Create the sub-folder `name`; False when an entry of that name exists already."""
        self._path(name)
        try:
            os.mkdir(name, dir_fd=self._fd)
        except FileExistsError:
            return False
        return True

    def folder(self, name: str, *, create: bool = False) -> RealFolder:
        """The sub-folder `name` (made when missing with `create`), itself a RealFolder (close it)."""
        rel = self._path(name)
        try:
            fd = os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=self._fd)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(name, dir_fd=self._fd)
            except FileExistsError:
                pass
            return self.folder(name)
        except OSError as exc:
            raise UnsafePathError(f"{rel} is {self._kind(name) or 'not a folder'}") from exc
        return RealFolder(fd, rel)

    def _kind(self, name: str) -> str:
        """What the entry `name` is, when it is not a plain folder or file ('' otherwise)."""
        try:
            mode = os.stat(name, dir_fd=self._fd, follow_symlinks=False).st_mode
        except OSError:
            return ""
        if stat.S_ISLNK(mode):
            return "a symbolic link"
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            return ""
        return "a special file (a pipe, socket or device)"

    def read_bytes(self, name: str, max_bytes: int) -> bytes | None:
        """The regular file `name`, at most `max_bytes` + 1 bytes of it (None: there is no such file)."""
        rel = self._path(name)
        flags = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(name, flags, dir_fd=self._fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            kind = self._kind(name)
            if kind:
                raise UnsafePathError(f"{rel} is {kind}") from exc
            raise
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise UnsafePathError(f"{rel} is {self._kind(name) or 'not a regular file'}")
            return fh.read(max_bytes + 1)

    def write(self, name: str, data: str | bytes, mode: int | None = None, *, sync_dir: bool = False) -> None:
        """`write_atomic` of the file `name` in this folder; an entry of that name that is not a
        regular file (a link, a folder, a pipe) is left alone and refused."""
        rel = self._path(name)
        try:
            st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(f"{rel} is {self._kind(name) or 'a folder'}")
        _replace(self._fd, name, data, mode, sync_dir=sync_dir, follow=False)


def real_folder(root: Path, rel: str | PurePosixPath = "", *, create: bool = False) -> RealFolder:
    """The folder `rel` (POSIX, relative) under `root`, each step opened without following a link
    (made when missing with `create`); UnsafePathError when a step is a link or not a folder.
    `root` itself is taken as given. Close the result (it is a context manager)."""
    current = RealFolder(os.open(root, _DIR_FLAGS), "")
    try:
        for part in PurePosixPath(rel).parts:
            nxt = current.folder(part, create=create)
            current.close()
            current = nxt
    except BaseException:
        current.close()
        raise
    return current
