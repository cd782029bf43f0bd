"""The embedding owner of an index folder: one process at a time embeds into it, the others wait and read.

Two processes on the same vault (the app and `explorer index`, `explorer watch` and `explorer mcp`)
would otherwise embed the same shards twice, each on its own, into the one vector cache. The
owner holds an exclusive `flock` on `embed.lock` in the index folder while it embeds; the file
says who it is (a line such as `explorer index (pid 4242)`). The lock belongs to the open file,
so the system releases it when the owner ends, however it ends: a crashed owner never blocks
the next one. A process that finds the lock taken waits, reads the vectors the owner commits
meanwhile, and embeds only what is left when the lock comes free.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
from pathlib import Path

__all__ = ["LOCK_FILE", "EmbedOwner", "name_this_process", "this_process"]

#: The lock file in the index folder.
LOCK_FILE = "embed.lock"
#: Most characters of the owner's description read back from the lock file.
_MAX_DESCRIPTION = 120

#: The commands run headless (`explorer index`); any other start of `explorer` opens the app.
_COMMANDS = frozenset(
    {"search", "why-not", "index", "stats", "find", "context", "open", "watch", "eval", "mcp"}
)

_role = ""


def name_this_process(role: str) -> None:
    """Say what this process is (`explorer index`, `the Explorer app`) to the processes waiting for it."""
    global _role
    _role = role


def this_process() -> str:
    """This process as a waiting process names it: its role (as named, else read from its command line) and pid."""
    return f"{_role or _role_from_argv()} (pid {os.getpid()})"


def _role_from_argv() -> str:
    argv = sys.argv
    if not argv or Path(argv[0]).name not in ("explorer", "__main__.py"):
        return "another Explorer process"
    first = next((a for a in argv[1:] if not a.startswith("-")), "")
    return f"explorer {first}" if first in _COMMANDS else "the Explorer app"


class EmbedOwner:
    """The embedding lock of one index folder, held by at most one process at a time.

    Args:
        directory: The index folder (it exists: the store is open in it).

    `acquire` never blocks: a caller that cannot have the lock waits in its own loop, where it
    can read the owner's vectors and notice that it was cancelled. Within a process the lock is
    held once; a second `acquire` while it is held returns True (the process owns it already).
    """

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None
        self._held = 0
        self._mutex = threading.Lock()

    def acquire(self) -> bool:
        """Take the lock if no other process holds it; True when this process holds it now.

        A folder where the lock file cannot be made (read-only, vanished) has no owner to wait
        for: True, and embedding goes on as it would without the lock.
        """
        with self._mutex:
            if self._held:
                self._held += 1
                return True
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError:
                return True
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except OSError:
                # A file system without locks (some network mounts): no owner can be known.
                os.close(fd)
                return True
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, (this_process() + "\n").encode("utf-8", "replace"), 0)
            except OSError:
                pass  # the lock is held; only its description is missing
            self._fd = fd
            self._held = 1
            return True

    def release(self) -> None:
        """Let the next process embed (after the last `release` matching an `acquire`)."""
        with self._mutex:
            if self._held > 1:
                self._held -= 1
                return
            self._held = 0
            fd, self._fd = self._fd, None
            if fd is not None:
                # Closing the file drops the lock; the description stays for nobody to read.
                os.close(fd)

    @property
    def held(self) -> bool:
        """True while this process holds the lock."""
        return self._held > 0

    def holder(self) -> str:
        """Who holds the lock, as its lock file says ('another Explorer process' when it says nothing)."""
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read(_MAX_DESCRIPTION * 4)
        except OSError:
            raw = b""
        text = raw.decode("utf-8", "replace").splitlines()[0].strip() if raw.strip() else ""
        return text[:_MAX_DESCRIPTION] or "another Explorer process"
