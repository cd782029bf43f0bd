"""Writing files safely: a temp file in the same folder, flushed to disk, then an atomic rename."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes, mode: int | None = None, *, sync_dir: bool = False) -> None:
    """Replace `path` with `data` so that readers see the old file or the new one, never a part.

    The temp file (`.<name>.<random>.tmp`, a name the vault scanner ignores) is written in the
    same folder, fsynced and renamed over `path`. An existing file keeps its permission bits; a
    file that no longer exists gets `mode` (e.g. the bits it had when it was opened), or else the
    bits a new file gets under the umask, never the temp file's 0600. Text is written as UTF-8
    without newline translation. With `sync_dir`, the folder is fsynced too, so the rename
    itself survives a power cut. On any failure the temp file is removed and the error raised.
    """
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


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
