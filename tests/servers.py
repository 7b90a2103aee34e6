"""Real servers on loopback for end-to-end tests: uvicorn in a background thread.

Each server gets a free port on 127.0.0.1 and its own event loop; tests talk to it over a
real socket with real clients (the openai SDK, httpx), never through an in-process transport.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from proxy.server.draining import OpenAIErrorHttpProtocol


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.01) -> None:
    """Poll `condition` until it holds; fail loudly at the deadline (never a bare sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(interval)


class ServerThread:
    """uvicorn on the HTTP protocol `toolcall-proxy serve` runs (`OpenAIErrorHttpProtocol`), so
    every end-to-end test runs the protocol users get. `options`: other uvicorn settings."""

    def __init__(self, app: Any, port: int | None = None, **options: Any):
        self.port = port or free_port()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            loop="uvloop",
            http=OpenAIErrorHttpProtocol,
            lifespan="on",
            **{"timeout_graceful_shutdown": 2, **options},
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None

    def _run(self) -> None:
        import uvloop

        self.loop = uvloop.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        self.thread.start()
        wait_for(lambda: self.server.started or not self.thread.is_alive(), timeout=15)
        if not self.server.started:
            raise RuntimeError("server failed to start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@contextmanager
def serving(app: Any, port: int | None = None, **options: Any) -> Iterator[ServerThread]:
    server = ServerThread(app, port, **options).start()
    try:
        yield server
    finally:
        server.stop()
