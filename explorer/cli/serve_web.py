"""`explorer serve [VAULT]`: the app in a browser tab, every tab on one engine, for this machine by default.

One process: textual-serve's page, script and fonts (served from the package: nothing is fetched
from the internet), and for each browser tab an app run in a thread of this process
(`explorer.tui.web.TabService`). All tabs share one engine session (`explorer.engine.shared`):
the vault is opened, parsed and embedded once, one watcher keeps it current, and
`explorer search` of the vault is answered by this process too.

Guards, on every request (the page, its script, the websocket of each tab):

1. Host must be the one printed (DNS rebinding: a web page whose name was made to resolve to
   127.0.0.1 sends its own name): 421 otherwise. An Origin, when sent, must be that same
   address: 403 otherwise (another site's page opening a websocket to this one).
2. A token: the printed URL carries it once (`?token=`), the server answers with an HttpOnly,
   SameSite=Strict cookie and sends the browser on to the same page without it; scripts may send
   `Authorization: Bearer <token>`. The token is `EXPLORER_SERVE_TOKEN` when set, else a new
   random one per run. On loopback too: other users of this machine reach loopback ports.
3. Listening beyond loopback needs a token set by the user (`EXPLORER_SERVE_TOKEN`), as
   `explorer mcp --http` needs EXPLORER_MCP_TOKEN, and a wildcard address (0.0.0.0) needs
   `--allow-host NAME` for the name browsers use (the Host check needs one).

Ctrl-C (or SIGTERM) closes every tab's app, then the engine, and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import quote

from explorer.cli.mcp_http import (
    EXIT_SETUP,
    Address,
    HttpSetupError,
    check_setup,
    listen,
    parse_address,
    read_token,
)
from explorer.config import Settings

if TYPE_CHECKING:
    from aiohttp import web

    from explorer.engine.shared import SharedSession

#: The environment variable holding the token (else a random one per run).
TOKEN_ENV = "EXPLORER_SERVE_TOKEN"
#: The port when none is given (a free one is taken when it is busy).
DEFAULT_PORT = 8771
#: Seconds the server gives its tabs and the engine to close on Ctrl-C before it stops waiting.
SHUTDOWN_S = 10.0
#: The page's title.
TITLE = "Explorer"

_WEB_FONT = '<link\n      rel="stylesheet"\n      href="https://fonts.googleapis.com/css?family=Roboto%20Mono"\n    />'


class WebGuard:
    """The Host, Origin and token checks of every request (an aiohttp middleware).

    Args:
        netlocs: The `host:port` values a request's Host may carry (the printed one first).
        token: The token (None: no token asked, for tests of the other checks).
        port: The server's port (names the cookie: cookies do not tell ports apart).
    """

    def __init__(self, netlocs: list[str], token: str | None, port: int) -> None:
        self.hosts = {n.lower() for n in netlocs}
        self.origins = {f"http://{n}" for n in self.hosts}
        self.token = token
        self.cookie = f"explorer-token-{port}"
        self.refused = 0
        """How many requests were refused (any check)."""

    def _token_ok(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        expected = self.token.encode()
        given = request.cookies.get(self.cookie, "").encode()
        if given and hmac.compare_digest(given, expected):
            return True
        auth = request.headers.get("Authorization", "")
        return auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].encode(), expected)

    async def __call__(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        from aiohttp import web

        host = (request.headers.get("Host") or "").lower()
        if host not in self.hosts:
            self.refused += 1
            return web.Response(status=421, text="Explorer: open the address `explorer serve` printed.\n")
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() not in self.origins:
            self.refused += 1
            return web.Response(status=403, text="Explorer: requests from other sites are refused.\n")
        given = request.query.get("token")
        if self.token is not None and given is not None:
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                self.refused += 1
                return web.Response(status=401, text="Explorer: wrong token.\n")
            # The token leaves the address bar (and the history) at once; the cookie carries it on.
            query = "&".join(f"{quote(k)}={quote(v)}" for k, v in request.query.items() if k != "token")
            moved = web.HTTPSeeOther(request.path + (f"?{query}" if query else ""))
            moved.set_cookie(self.cookie, self.token, httponly=True, samesite="Strict", path="/")
            _private(moved)
            return moved
        if not self._token_ok(request):
            self.refused += 1
            return web.Response(
                status=401,
                text="Explorer: open the full address `explorer serve` printed (with its token).\n",
            )
        response = await handler(request)
        if not response.prepared:
            _private(response)
        return response


def _private(response: web.StreamResponse) -> None:
    """Headers of a page showing a private vault: not cached, not framed by other sites, no referrer."""
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")


def make_server(
    public_url: str,
    guard: WebGuard,
    make_tab_app: Callable[[], Any],
    streams: tuple[TextIO, TextIO],
) -> Any:
    """The textual-serve `Server` serving `make_tab_app()` per tab in this process, behind `guard`."""
    from aiohttp import web
    from textual_serve.server import Server, log

    from explorer.tui.web import TabService

    class WebServer(Server):
        """textual-serve's server: its page, static files and websocket protocol; the tabs in process."""

        tabs: set[TabService]

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()

            @web.middleware
            async def guarded(
                request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
            ) -> web.StreamResponse:
                return await guard(request, handler)

            app.middlewares.append(guarded)
            return app

        def initialize_logging(self) -> None:
            logging.getLogger("textual-serve").setLevel(logging.WARNING)

        async def on_startup(self, app: web.Application) -> None:
            return None  # the URL is printed by run_serve, once

        async def handle_index(self, request: web.Request) -> Any:
            response = await super().handle_index(request)
            # The page's font from the package instead of the internet (a private vault's page asks
            # nothing of another site, and works offline).
            font = (
                "<style>@font-face { font-family: 'Roboto Mono'; "
                f"src: url('{self.public_url}/static/fonts/RobotoMono-VariableFont_wght.ttf'); }}</style>"
            )
            if isinstance(response, web.Response):
                response.text = (response.text or "").replace(_WEB_FONT, font)
            return response

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            """textual-serve's, with the tab's app in this process (`TabService`)."""
            from textual_serve.server import to_int

            websocket = web.WebSocketResponse(heartbeat=15)
            width = max(20, min(to_int(request.query.get("width", "80"), 80), 1000))
            height = max(5, min(to_int(request.query.get("height", "24"), 24), 500))
            service: TabService | None = None
            try:
                await websocket.prepare(request)
                service = TabService(
                    make_tab_app,
                    streams=streams,
                    write_bytes=websocket.send_bytes,
                    write_str=websocket.send_str,
                    close=websocket.close,
                    download_manager=self.download_manager,
                )
                self.tabs.add(service)
                await service.start(width, height)
                try:
                    await self._process_messages(websocket, service)
                finally:
                    await service.stop()
            except asyncio.CancelledError:
                await websocket.close()
            except Exception as error:  # noqa: BLE001 - one tab's failure is logged, the server lives on
                log.exception(error)
            finally:
                if service is not None:
                    await service.stop()
                    self.tabs.discard(service)
                    await asyncio.to_thread(_reclaim)
            return websocket

    server = WebServer("explorer", title=TITLE, public_url=public_url)
    server.tabs = set()
    return server


def _reclaim() -> None:
    """Free a closed tab's app: the apps freeze the heap when it settles (`explorer.tui.app.settle_heap`),
    and what a closed tab leaves in reference cycles is only found by a collection of the thawed heap."""
    import gc

    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _parse(host: str, port: int) -> Address:
    host = host.strip().strip("[]")
    return parse_address(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")


def run_serve(
    vault: Path,
    settings: Settings,
    host: str = "127.0.0.1",
    port: int | None = None,
    allow_hosts: list[str] | None = None,
) -> int:
    """Serve the app for `vault` at http://HOST:PORT until interrupted; EXIT_SETUP when it cannot start."""
    err = sys.stderr

    def say(message: str) -> None:
        print(f"explorer: {message}", file=err, flush=True)

    hosts = [h.strip() for h in allow_hosts or [] if h.strip()]
    try:
        address = _parse(host, DEFAULT_PORT if port is None else port)
        user_token = read_token(os.environ, TOKEN_ENV)
        check_setup(address, user_token, hosts, TOKEN_ENV)
        try:
            sock = listen(address)
        except HttpSetupError:
            if port is not None:
                raise
            address = _parse(host, 0)  # the default port is taken: any free one
            sock = listen(address)
    except HttpSetupError as exc:
        say(str(exc))
        return EXIT_SETUP
    bound = sock.getsockname()[1]
    names = [address.netloc(bound)] if not _wildcard(address) else []
    names += [h if ":" in h.rsplit("]", 1)[-1] else f"{h}:{bound}" for h in hosts]
    token = user_token or secrets.token_urlsafe(24)
    guard = WebGuard(names, token, bound)
    public_url = f"http://{names[0]}"
    return asyncio.run(_serve(vault, settings, sock, public_url, guard, say))


def _wildcard(address: Address) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(address.host).is_unspecified
    except ValueError:
        return False


async def _serve(
    vault: Path,
    settings: Settings,
    sock: Any,
    public_url: str,
    guard: WebGuard,
    say: Callable[[str], None],
) -> int:
    # Textual reads its colour system when first imported: the browser's terminal has 24-bit colour.
    os.environ.setdefault("TEXTUAL_COLOR_SYSTEM", "truecolor")
    from aiohttp import web

    from explorer.engine.shared import SharedSession
    from explorer.tui.app import make_app

    streams = (sys.stdout, sys.stderr)
    shared = SharedSession(vault, settings, on_message=say)
    opener = threading.Thread(target=shared.open, name="explorer-open", daemon=True)
    started = time.perf_counter()
    opener.start()

    def make_tab_app() -> Any:
        return make_app(vault, settings, shared=shared)

    server = make_server(public_url, guard, make_tab_app, streams)
    runner = web.AppRunner(await server._make_app(), handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"{public_url}/?token={guard.token}" if guard.token else f"{public_url}/", flush=True)
    say("open the address above in a browser on this machine; Ctrl-C stops the server")
    watch_open = asyncio.create_task(_report_open(shared, started, say))
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        watch_open.cancel()
        await _shutdown(server, runner, shared, opener)
        sock.close()
    return 0


async def _report_open(shared: SharedSession, started: float, say: Callable[[str], None]) -> None:
    """Say once when the index is open (or why it is not)."""
    while not await asyncio.to_thread(shared.wait_open, 0.5):
        pass
    if shared.error:
        say(f"cannot open the index: {shared.error}")
        return
    index = shared.session.index
    notes = index.note_count() if index is not None else 0
    say(f"{notes} notes ready in {time.perf_counter() - started:.1f} s")


async def _shutdown(server: Any, runner: Any, shared: SharedSession, opener: threading.Thread) -> None:
    """Every tab's app quits, the listener closes, then the engine closes (in that order)."""
    tabs = list(server.tabs)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(
            asyncio.gather(*(tab.stop() for tab in tabs), return_exceptions=True), SHUTDOWN_S
        )
    with contextlib.suppress(Exception):
        await runner.cleanup()
    await asyncio.to_thread(shared.close, True)
    await asyncio.to_thread(opener.join, SHUTDOWN_S)
