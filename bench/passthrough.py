"""The Python floor for any proxy: the least an HTTP/1.1 proxy in Python can do on uvloop.

Each client connection gets its own keep-alive connection to the upstream. Bytes go on as
they arrive, both ways, and httptools parses them on the way (the framing any proxy must
read). Nothing else happens: no ASGI, no task per request, no JSON, no log line, no ids.

What the proxy costs beyond this row is what it does with a request, in Python. What this row
costs over direct is the extra hop and the event loop's. A reference only: it forwards a
request whatever it is, with the client's own head.
Run as `python -m bench.passthrough UPSTREAM_PORT PORT`; it prints `ready` once it listens.
"""

from __future__ import annotations

import asyncio
import sys
from typing import cast

import httptools
import uvloop


class _Upstream(asyncio.Protocol):
    """The upstream side of one client connection: what arrives goes to the client."""

    def __init__(self, client: asyncio.Transport) -> None:
        self._client = client
        self._parser = httptools.HttpResponseParser(self)

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)
        self._client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._client.close()


class _Client(asyncio.Protocol):
    """One client connection: its bytes go upstream once the upstream connection is open."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._upstream: asyncio.Transport | None = None
        self._held: list[bytes] = []  # what arrived before the upstream connection opened
        self._parser = httptools.HttpRequestParser(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._connecting = asyncio.ensure_future(self._connect())  # held: tasks are weak

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        client = cast(asyncio.Transport, self._transport)  # uvloop's: not a subclass of it
        upstream, _ = await loop.create_connection(
            lambda: _Upstream(client), "127.0.0.1", self._upstream_port
        )
        if client.is_closing():  # the client left while the upstream connection opened
            upstream.close()
            return
        self._upstream = upstream
        for data in self._held:
            upstream.write(data)
        self._held.clear()

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)
        if self._upstream is None:
            self._held.append(data)
        else:
            self._upstream.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._upstream is not None:
            self._upstream.close()


async def _serve(upstream_port: int, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Client(upstream_port), "127.0.0.1", port, backlog=4096
    )
    print("ready", flush=True)
    await server.serve_forever()


def main() -> None:
    upstream_port, port = int(sys.argv[1]), int(sys.argv[2])
    uvloop.run(_serve(upstream_port, port))


if __name__ == "__main__":
    main()
