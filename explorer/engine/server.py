"""Answering one-shot searches of a vault from a running process over a private Unix socket, as JSON.

The process that keeps a vault's index open (the app, `explorer watch`, `explorer mcp`: an engine
`Session` with `serve=True`) listens on a socket only this user can reach; `explorer search` asks
it first (`ask`) and renders the answer itself (`SearchResults.from_dict`), so the served answer
prints exactly as a search in the command's own process would.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.config import Settings

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend
    from explorer.search.core.pipeline import SearchPipeline

# The server's own modules (threading, socketserver) and the pipeline are imported where they are
# used, so that a one-shot command asking a running process pays only for this module.

try:
    from _blake2 import blake2b as _blake2b  # what hashlib.blake2b is, without loading OpenSSL
except ImportError:  # a Python built without it
    from hashlib import blake2b as _blake2b

#: Version of the request/answer format on the socket.
PROTOCOL = 2
_MAX_REQUEST = 1 << 16
#: Seconds between the serving loop's checks for a stop request (stopping waits for one).
SERVE_POLL_S = 0.05
#: Longest socket path the system takes (sun_path holds 108 bytes with its terminating zero).
_SOCKET_PATH_MAX = 107
#: Seconds a connection may wait on the socket (a request that never comes, a reader that never reads).
REQUEST_TIMEOUT_S = 10.0


def socket_path(vault: Path) -> Path:
    """Where the process serving `vault` listens: a socket in a folder only this user can open.

    `$XDG_RUNTIME_DIR/explorer/` when that is set, else `<tmp>/explorer-<uid>/` (`/tmp/explorer-<uid>/`
    when that path would be too long for a socket); the file name is a hash of the vault's resolved path.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        folder = Path(runtime) / "explorer"
    else:
        import tempfile

        folder = Path(tempfile.gettempdir()) / f"explorer-{os.getuid()}"
    key = _blake2b(str(Path(vault).resolve()).encode(), digest_size=8).hexdigest()
    path = folder / f"{key}.sock"
    if len(os.fsencode(path)) > _SOCKET_PATH_MAX:
        # A long $TMPDIR or runtime folder: no socket can be made there, /tmp has room.
        path = Path("/tmp") / f"explorer-{os.getuid()}" / f"{key}.sock"
    return path


def _private_folder(folder: Path, create: bool) -> bool:
    """True when `folder` is a real directory owned by this user that nobody else can enter."""
    if create:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return False
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    import stat

    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def settings_key(settings: Settings) -> str:
    """A fingerprint of what shapes an answer; a server answers only clients whose settings match."""
    # The code's own location too: two checkouts never answer each other.
    parts = (
        str(Path(__file__).resolve().parent.parent),
        settings.vault,
        settings.index,
        settings.search,
        settings.rerank,
        settings.llm,
        settings.experimental,
    )
    return _blake2b(repr(parts).encode(), digest_size=12).hexdigest()


class SearchServer:
    """Answers `explorer search` for one vault over a Unix socket, from an index this process keeps.

    The socket file is mode 0600 in a 0700 folder, and each connection's peer must be this user
    (SO_PEERCRED). Before answering, `sync` brings the index up to date with every change saved
    before the request (read-your-writes): in a session with a watcher it waits for the watcher to
    have applied them (`VaultWatcher.wait_idle`), otherwise it refreshes from the disk. The answer
    is the results' JSON form (`SearchResults.to_dict`); the client renders it.

    Args:
        vault: The vault root.
        index: Its open index.
        settings: The settings the index runs with (clients with other settings are refused).
        sync: Called before each search; default `index.refresh()`.
        pipeline: The pipeline to search with (a session's); default one built on first use.
        load_model: Start loading the embedding model when serving starts (a session's embedding
            loop loads it instead).
    """

    def __init__(
        self,
        vault: Path,
        index: IndexBackend,
        settings: Settings,
        sync: Callable[[], Any] | None = None,
        pipeline: SearchPipeline | None = None,
        load_model: bool = True,
    ) -> None:
        self.vault = Path(vault).resolve()
        self.index = index
        self.settings = settings
        self.sync = sync or (lambda: index.refresh())
        self.load_model = load_model
        self.path = socket_path(self.vault)
        self.key = settings_key(settings)
        import threading

        self._pipeline: SearchPipeline | None = pipeline
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._warmer: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> bool:
        """Listen in a daemon thread; False (and nothing served) when the socket cannot be made safely.

        A live socket of another process serving the same vault is left alone.
        """
        if not _private_folder(self.path.parent, create=True):
            return False
        if self.path.exists() or self.path.is_symlink():
            if ask(self.vault, {"op": "ping"}, timeout=0.5) is not None:
                return False
            try:
                self.path.unlink()
            except OSError:
                return False
        import socketserver
        import threading

        outer = self

        class Handler(socketserver.StreamRequestHandler):
            # A client that connects and sends nothing cannot hold `stop` up for longer than this.
            timeout = REQUEST_TIMEOUT_S

            def handle(self) -> None:
                try:
                    outer._handle(self.connection, self.rfile, self.wfile)
                except OSError:
                    pass  # the client went away or timed out

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            # Request threads run searches (the model, a native runtime): `stop` waits for them, so
            # none is inside the runtime when the interpreter exits.
            daemon_threads = False
            block_on_close = True

        old = os.umask(0o177)
        try:
            self._server = Server(str(self.path), Handler)
        except OSError:
            return False
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        # A short poll interval: `stop` (on quitting the app) waits for the serving loop to notice.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SERVE_POLL_S},
            name="explorer-serve",
            daemon=True,
        )
        self._thread.start()
        self._warmer = threading.Thread(target=self._warm, name="explorer-serve-warm", daemon=True)
        self._warmer.start()
        return True

    def _warm(self) -> None:
        """Get ready for the first request: the model loading, the pipeline and its tables built.

        A request arriving meanwhile waits for the pipeline (the same lock) instead of building
        another; a failure here is left for that request to meet and report.
        """
        if self.load_model and self.settings.index.embeddings:
            self.index.load_model_in_background()
        try:
            with self._lock:
                if self._stopping.is_set():
                    return
                self.sync()
                self._pipeline_now().prepare()
        except Exception:  # noqa: BLE001 - the first search builds it again and reports the error
            pass

    def stop(self) -> None:
        """Stop listening, wait for the requests and the warm-up running, and remove the socket."""
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._warmer is not None:
            self._warmer.join()
        self._server = None
        try:
            self.path.unlink()
        except OSError:
            pass

    def _handle(self, conn: socket.socket, rfile: Any, wfile: Any) -> None:
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            if uid != os.getuid():
                return
        except (OSError, AttributeError):
            return
        line = rfile.readline(_MAX_REQUEST + 1)
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("not an object")
            answer = self._answer(req)
        except Exception as exc:  # noqa: BLE001 - a bad request gets an error answer, the server lives on
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        wfile.write(json.dumps(answer, ensure_ascii=True).encode() + b"\n")

    def _answer(self, req: dict[str, Any]) -> dict[str, Any]:
        if req.get("protocol") not in (None, PROTOCOL):
            return {"ok": False, "error": "protocol"}
        if req.get("op") == "ping":
            return {"ok": True}
        if req.get("op") != "search":
            return {"ok": False, "error": "unknown op"}
        if req.get("settings") != self.key:
            return {"ok": False, "error": "settings differ"}
        query = req.get("query")
        k = req.get("k")
        if not isinstance(query, str) or (k is not None and (not isinstance(k, int) or k < 1)):
            return {"ok": False, "error": "bad request"}
        from explorer.search.core.pipeline import QueryError

        with self._lock:
            self.sync()
            try:
                results = self._pipeline_now().search(
                    query,
                    k=k,
                    dense=not req.get("lexical"),
                    two_pass=False if req.get("one_pass") else None,
                    rerank=req.get("rerank"),
                    correct=req.get("correct") is not False,
                    # Answered as the command's own process would: no history of earlier
                    # searches (no "you already searched" advice), nothing kept in the app's.
                    record=False,
                )
            except QueryError as exc:
                return {"ok": True, "query_error": str(exc)}
        return {"ok": True, "results": results.to_dict()}

    def _pipeline_now(self) -> SearchPipeline:
        """The pipeline, built on first use (under the server's lock)."""
        if self._pipeline is None:
            from explorer.engine.build import make_pipeline

            self._pipeline = make_pipeline(self.index, self.settings)
        return self._pipeline


def ask(vault: Path, request: dict[str, Any], timeout: float = 30.0) -> dict[str, Any] | None:
    """Send one request to the process serving `vault`; None when none answers (or it is not safe to ask)."""
    path = socket_path(vault)
    if not path.exists() or not _private_folder(path.parent, create=False):
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(json.dumps(dict(request, protocol=PROTOCOL)).encode() + b"\n")
            chunks = []
            while True:
                data = sock.recv(1 << 20)
                if not data:
                    break
                chunks.append(data)
        answer = json.loads(b"".join(chunks))
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) and answer.get("ok") else None
