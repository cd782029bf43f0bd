"""The app in a browser tab: one ExplorerApp per browser connection, each in a thread of the serving process.

textual-serve (`AppService`) gives each browser connection a subprocess running Textual's
WebDriver, and talks to it in packets over the process's stdin and stdout. `TabService` keeps
that protocol and textual-serve's own packet handling, but runs the app in a thread of this
process behind `TabDriver`, a WebDriver whose stdin and stdout are in memory. So every tab's app
reads the one index, pipeline, watcher and model of the process's shared engine session
(`explorer.engine.shared`), and a tab costs an app's widgets, not a second engine. Nothing runs
as a child process.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, TextIO

from textual import events
from textual.app import App
from textual.driver import Driver
from textual.drivers.web_driver import WebDriver
from textual.geometry import Size
from textual_serve.app_service import AppService

log = logging.getLogger("explorer.serve")

#: Seconds the input thread waits for a packet before letting the key parser time out an Escape.
INPUT_POLL_S = 0.1
#: Seconds a closing tab's app is given to finish before its thread is left to end on its own.
APP_EXIT_S = 10.0


class _Pipe:
    """The app's stdin, in memory: the server's loop writes packets, the driver's input thread reads them."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._closed = threading.Event()

    def write(self, data: bytes) -> None:
        """A packet from the browser (any thread)."""
        if not self._closed.is_set():
            self._queue.put(data)

    async def drain(self) -> None:
        """Nothing to wait for: the queue has no limit (a tab sends keys and sizes, not bulk)."""

    def close(self) -> None:
        """End the input (the iterator stops)."""
        self._closed.set()
        self._queue.put(None)

    def __iter__(self) -> Iterator[bytes]:
        """Packets as they come, and an empty read every INPUT_POLL_S (the parser's clock)."""
        while not self._closed.is_set():
            try:
                data = self._queue.get(timeout=INPUT_POLL_S)
            except queue.Empty:
                yield b""
                continue
            if data is None:
                return
            yield data


class TabDriver(WebDriver):
    """Textual's WebDriver with its stdin and stdout in memory, for an app run in a thread.

    The same packets as over a pipe (`D` data, `M` meta, `P` packed), so textual-serve's
    `AppService` reads them unchanged; no signal handlers (they belong to the main thread,
    where the server handles Ctrl-C for every tab).
    """

    pipe: _Pipe
    sink: Callable[[bytes], None]

    def __init__(
        self, app: App[Any], *, debug: bool = False, mouse: bool = True, size: tuple[int, int] | None = None
    ) -> None:
        # WebDriver's own __init__ opens the process's stdin and stdout; this one sets the same
        # attributes over the tab's pipe and sink.
        Driver.__init__(self, app, debug=debug, mouse=mouse, size=size)
        self._write = self.sink  # type: ignore[assignment]  # bytes in, as WebDriver's os.write partial
        self.exit_event = threading.Event()
        self._key_thread = threading.Thread(target=self.run_input_thread, name="textual-input", daemon=True)
        self._input_reader = self.pipe  # type: ignore[assignment]  # the same iteration and close()
        self._deliveries = {}

    def start_application_mode(self) -> None:
        """As WebDriver's, without the signal handlers."""
        loop = asyncio.get_running_loop()
        self._write(b"__GANGLION__\n")
        self.write("\x1b[?1049h")  # alternate screen
        self._enable_mouse_support()
        self.write("\x1b[?25l")  # hide the cursor
        self.write("\033[?1003h")
        size = Size(80, 24) if self._size is None else Size(*self._size)
        event = events.Resize(size, size)
        asyncio.run_coroutine_threadsafe(self._app._post_message(event), loop=loop)
        self._request_terminal_sync_mode_support()
        self._enable_bracketed_paste()
        self.flush()
        self._key_thread.start()
        self._app.call_later(self._app.post_message, events.AppBlur())


def _driver_class(pipe: _Pipe, sink: Callable[[bytes], None]) -> type[TabDriver]:
    return type("TabDriverOfOneTab", (TabDriver,), {"pipe": pipe, "sink": staticmethod(sink)})


class TabService(AppService):
    """One browser tab: textual-serve's app service, the app run in a thread of this process.

    Args:
        make_app: Builds the tab's app (called in the server's loop, before the thread starts).
        streams: The process's stdout and stderr: each app redirects the interpreter's streams
            while it runs, and with several apps in one process they must all redirect to these.
        on_exit: Called (from the app's thread) when the app ended, with the service.
        kwargs: `AppService`'s (the websocket's writers, the download manager).
    """

    def __init__(
        self,
        make_app: Callable[[], App[Any]],
        *,
        streams: tuple[TextIO, TextIO] = (sys.stdout, sys.stderr),
        on_exit: Callable[[TabService], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__("explorer", **kwargs)
        self._make_app = make_app
        self._streams = streams
        self._on_exit = on_exit
        self._thread: threading.Thread | None = None
        self.app: App[Any] | None = None
        """The tab's app (None until the tab started)."""

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
        """Start the tab's app in a thread; what textual-serve reads as its process's pipes."""
        loop = asyncio.get_running_loop()
        stdout = asyncio.StreamReader(loop=loop)
        stderr = asyncio.StreamReader(loop=loop)
        stderr.feed_eof()  # the app's errors go to the process's log, not through the tab

        def sink(data: bytes) -> None:
            try:
                loop.call_soon_threadsafe(stdout.feed_data, data)
            except RuntimeError:
                pass  # the server's loop has closed: nobody reads the tab any more

        pipe = _Pipe()
        app = self._make_app()
        app.driver_class = _driver_class(pipe, sink)
        # Every app in this process redirects stdout and stderr to the same streams, so apps that
        # start and end in any order leave the interpreter's streams as they found them.
        app._capture_stdout = self._streams[0]  # type: ignore[assignment]
        app._capture_stderr = self._streams[1]  # type: ignore[assignment]
        self.app = app

        def run() -> None:
            try:
                app.run(size=(width, height))
            except BaseException:  # one tab's failure must not take the server down
                log.exception("a tab's app failed")
            finally:
                pipe.close()
                try:
                    loop.call_soon_threadsafe(stdout.feed_eof)
                except RuntimeError:
                    pass
                if self._on_exit is not None:
                    self._on_exit(self)

        self._thread = threading.Thread(
            target=run, name=f"explorer-tab-{self.app_service_id[:8]}", daemon=True
        )
        self._stdin = pipe  # type: ignore[assignment]  # write() and drain(), as a StreamWriter
        self._process = SimpleNamespace(stdout=stdout, stderr=stderr, stdin=pipe)  # type: ignore[assignment]
        self._thread.start()
        return self._process

    async def stop(self) -> None:
        """Ask the app to quit, wait for it (at most APP_EXIT_S), and for the thread."""
        try:
            await asyncio.wait_for(super().stop(), APP_EXIT_S)
        except TimeoutError:
            log.warning("a tab's app did not quit in %.0f s", APP_EXIT_S)
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, APP_EXIT_S)

    @property
    def running(self) -> bool:
        """Whether the tab's app thread is alive."""
        return self._thread is not None and self._thread.is_alive()
