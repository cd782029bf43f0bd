"""`explorer mcp --http HOST:PORT`: the MCP tools over the SDK's streamable HTTP transport, for several agents.

One process, one index, one MemoryService (explorer.engine.memory); each agent is its own MCP
session at `/mcp`. The SDK runs every tool call in a worker thread, so searches of different
clients proceed at once against the one index (its lock guards each stage's reads; `remember`
writes under the service's write lock and refreshes the index under the index lock, so a search
sees a note whole or not at all).

Guards, outermost first:

1. A bearer token (`Authorization: Bearer <token>`, compared in constant time) when
   `EXPLORER_MCP_TOKEN` is set; without one the server listens on loopback only.
2. The SDK's transport-security check of `Host` and `Origin` (DNS rebinding: a web page whose
   name was made to resolve to 127.0.0.1 sends its own name as Host and its own Origin, and is
   refused with 421 / 403).
3. The SDK's request-body limit (413 past `MAX_BODY_BYTES`), then each tool's own argument checks.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.config import Settings

#: The environment variable holding the bearer token.
TOKEN_ENV = "EXPLORER_MCP_TOKEN"
#: Where the MCP endpoint is served.
MCP_PATH = "/mcp"
#: Largest request body (a `remember` of MAX_REMEMBER_CHARS fits with room for JSON escapes).
MAX_BODY_BYTES = 1024 * 1024
#: Most open MCP sessions (each agent holds one); a session idle this long is closed.
MAX_SESSIONS = 256
SESSION_IDLE_S = 15 * 60
#: Shortest token accepted: a guessable secret is no secret.
MIN_TOKEN_CHARS = 16
#: Exit code of a setup failure (bad address, port in use, no token beyond loopback).
EXIT_SETUP = 2

_LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
_LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


class HttpSetupError(Exception):
    """The HTTP server cannot start; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Address:
    """Where to listen."""

    host: str
    """An IP address or `localhost`, without brackets."""
    port: int
    """0 picks a free port (the one chosen is printed)."""

    @property
    def loopback(self) -> bool:
        """Whether only this machine can connect."""
        return is_loopback(self.host)

    def netloc(self, port: int | None = None) -> str:
        """`host:port` as it appears in a URL or a Host header."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port if port is None else port}"


def parse_address(text: str) -> Address:
    """`127.0.0.1:8765`, `localhost:8765`, `[::1]:8765` or `0.0.0.0:8765` as an Address.

    Raises:
        HttpSetupError: Not HOST:PORT, a port outside 0-65535, or a host that is no IP address.
    """
    raw = (text or "").strip()
    if raw.startswith("["):
        host, sep, rest = raw[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        ok = bool(sep) and rest.startswith(":")
    else:
        host, sep, port_text = raw.rpartition(":")
        ok = bool(sep) and ":" not in host
    if not ok or not host or not port_text.isdigit():
        raise HttpSetupError(f"--http {text!r}: give HOST:PORT, e.g. 127.0.0.1:8765 (IPv6: [::1]:8765)")
    port = int(port_text)
    if port > 65535:
        raise HttpSetupError(f"--http {text!r}: port {port} is outside 0-65535")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise HttpSetupError(f"--http {text!r}: {host!r} is not an IP address or localhost") from None
    return Address(host, port)


def is_loopback(host: str) -> bool:
    """Whether `host` (an IP address or `localhost`) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(environ: dict[str, str] | os._Environ[str] = os.environ, name: str = TOKEN_ENV) -> str | None:
    """The bearer token from the variable `name` (EXPLORER_MCP_TOKEN), None when unset or empty.

    Raises:
        HttpSetupError: A token shorter than MIN_TOKEN_CHARS or with characters a header cannot carry.
    """
    token = (environ.get(name) or "").strip()
    if not token:
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise HttpSetupError(
            f"{name} has {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    if not all(33 <= ord(c) < 127 for c in token):
        raise HttpSetupError(f"{name} must be printable ASCII without spaces")
    return token


def check_setup(
    address: Address, token: str | None, allow_hosts: list[str], token_env: str = TOKEN_ENV
) -> None:
    """Refuse a set-up that would expose the vault (`token_env`: the variable a token comes from).

    Raises:
        HttpSetupError: Beyond loopback without a token, or on every interface without `allow_hosts`.
    """
    if not address.loopback and token is None:
        raise HttpSetupError(
            f"refusing to listen on {address.host} (beyond loopback) without a token: "
            f"set {token_env}, or listen on 127.0.0.1"
        )
    if _wildcard(address.host) and not allow_hosts:
        raise HttpSetupError(
            f"listening on {address.host} needs --allow-host NAME for each name clients "
            "use to reach this machine (the Host header is checked)"
        )


def _wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def security_settings(address: Address, port: int, allow_hosts: list[str]) -> Any:
    """The SDK's TransportSecuritySettings: the Host and Origin values a request may carry."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts: list[str] = []
    origins: list[str] = []
    if address.loopback or _wildcard(address.host):  # a loopback name in Host is sent by a local client only
        hosts += _LOOPBACK_HOSTS
        origins += _LOOPBACK_ORIGINS
    if not address.loopback and not _wildcard(address.host):
        hosts.append(address.netloc(port))
        origins.append(f"http://{address.netloc(port)}")
    for name in allow_hosts:
        entry = name if re.search(r":(\d+|\*)$", name) and not name.endswith("]") else f"{name}:{port}"
        hosts.append(entry)
        origins.append(f"http://{entry}")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class BearerGate:
    """ASGI middleware: every HTTP request needs `Authorization: Bearer <token>`, else 401.

    Args:
        app: The ASGI application behind the gate.
        token: The expected token.
    """

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode("ascii")

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                given = value
                break
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="explorer"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def listen(address: Address) -> socket.socket:
    """A socket bound to `address` and listening (before the index loads, so a busy port fails at once).

    Raises:
        HttpSetupError: The port is in use, or the address is not this machine's.
    """
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    host = "127.0.0.1" if address.host == "localhost" else address.host
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, address.port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        import errno

        if exc.errno == errno.EADDRINUSE:
            raise HttpSetupError(f"cannot listen on {address.netloc()}: the port is in use") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise HttpSetupError(
                f"cannot listen on {address.netloc()}: not an address of this machine"
            ) from None
        if exc.errno == errno.EACCES:
            raise HttpSetupError(
                f"cannot listen on {address.netloc()}: permission denied (ports below 1024)"
            ) from None
        raise HttpSetupError(f"cannot listen on {address.netloc()}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def build_app(server: Any, address: Address, port: int, token: str | None, allow_hosts: list[str]) -> Any:
    """The ASGI application: the SDK's streamable HTTP app at MCP_PATH behind the bearer gate."""
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        max_request_body_size=MAX_BODY_BYTES,
        max_sessions=MAX_SESSIONS,
        session_idle_timeout=SESSION_IDLE_S,
        transport_security=security_settings(address, port, allow_hosts),
        host=address.host,
    )
    return BearerGate(app, token) if token is not None else app


class HttpServer:
    """A uvicorn server for `app` on an already listening socket; `serve` blocks, `stop` ends it."""

    def __init__(self, app: Any, sock: socket.socket) -> None:
        import uvicorn

        self.sock = sock

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                # uvicorn's own raises the signal again after shutting down, which would skip closing the index.
                if threading.current_thread() is not threading.main_thread():
                    yield
                    return
                saved = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
                try:
                    yield
                finally:
                    for sig, handler in saved.items():
                        signal.signal(sig, handler)

        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2
        )
        self._server = Server(config)

    @property
    def started(self) -> bool:
        """Whether it accepts connections."""
        return bool(self._server.started)

    def serve(self) -> None:
        """Serve until `stop` or a signal (SIGINT / SIGTERM)."""
        import anyio

        anyio.run(lambda: self._server.serve(sockets=[self.sock]))

    def stop(self) -> None:
        """Ask the serving loop to finish (from any thread)."""
        self._server.should_exit = True


def run_mcp_http(
    vault: Path,
    settings: Settings,
    http: str,
    *,
    allow_write: bool = False,
    user: str | None = None,
    watch: bool = True,
    allow_hosts: list[str] | None = None,
) -> int:
    """Serve `vault` over streamable HTTP at `http` (HOST:PORT) until interrupted; EXIT_SETUP when it cannot start."""
    from explorer.cli.mcp import build_server, load_sdk
    from explorer.engine.memory import MemoryService

    def say(message: str) -> None:
        print(f"explorer: {message}", file=sys.stderr, flush=True)

    hosts = [h.strip() for h in allow_hosts or [] if h.strip()]
    logging.getLogger("mcp").setLevel(logging.WARNING)  # not a line per session on stderr
    try:
        address = parse_address(http)
        token = read_token()
        check_setup(address, token, hosts)
        sock = listen(address)
    except HttpSetupError as exc:
        say(str(exc))
        return EXIT_SETUP
    port = sock.getsockname()[1]
    try:
        load_sdk()
        service = MemoryService(
            vault, settings, allow_write=allow_write, user=user, watch=watch, on_message=say
        )
    except BaseException:
        sock.close()
        raise
    try:
        app = build_app(build_server(service), address, port, token, hosts)
        server = HttpServer(app, sock)
        if token is None:
            say(f"no {TOKEN_ENV}: any program on this machine may call the tools")
        where = (
            hosts[0]
            if _wildcard(address.host) and ":" not in hosts[0]
            else address.netloc(port).rsplit(":", 1)[0]
        )
        say(
            f"MCP over HTTP at http://{where}:{port}{MCP_PATH}"
            + (" (bearer token required)" if token else "")
        )
        server.serve()
    finally:
        sock.close()
        service.close()
    return 0
