"""An ASGI app for testing the server's HTTP protocol: each path is one behaviour, and what
the app saw (the messages `receive()` returned, how far a stream got) is recorded for the test.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import orjson

from tests.servers import ServerThread

FLOOD_CHUNK = 64 * 1024
FLOOD_CHUNKS = 512  # 32 MiB: far more than the socket buffers and the transport hold


class Probe:
    def __init__(self) -> None:
        self.seen: list[str] = []  # what receive() returned after the body, per request
        self.flood_sent = 0
        self.flood_done = False
        self.go: asyncio.Event | None = None  # releases /hold (created on the server's loop)
        self.lock = threading.Lock()

    def note(self, what: str) -> None:
        with self.lock:
            self.seen.append(what)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        handler = getattr(self, "_" + scope["path"].strip("/").replace("-", "_"))
        await handler(scope, receive, send)

    async def _echo(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_body(receive)
        answer = orjson.dumps(
            {
                "length": len(body),
                "body_head": body[:32].decode("latin-1"),
                "method": scope["method"],
                "path": scope["path"],
                "raw_path": scope["raw_path"].decode(),
                "query": scope["query_string"].decode(),
                "http_version": scope["http_version"],
            }
        )
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    async def _wait_disconnect(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Reads the body, then waits for the client to leave (a slow upstream's place)."""
        await read_body(receive)
        self.note((await receive())["type"])

    async def _hold(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A stream whose first bytes wait for the test: its head must not."""
        self.go = asyncio.Event()
        await read_body(receive)
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await asyncio.wait_for(self.go.wait(), 30)
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def _stream_then_wait(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A stream that has begun, then waits for the client to leave."""
        await read_body(receive)
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        self.note((await receive())["type"])

    async def _pending_at_end(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A receive() waiting when the response ends gets http.disconnect (ASGI)."""
        await read_body(receive)
        waiting = asyncio.ensure_future(receive())
        await asyncio.sleep(0)  # let it start waiting
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})
        self.note((await asyncio.wait_for(waiting, 10))["type"])
        self.note((await receive())["type"])  # and so does one called after it

    async def _bad_header(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await read_body(receive)
        headers = [(b"x-upstream", b"ok\r\nx-injected: yes"), (b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    async def _boom(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise RuntimeError("the app failed before its response")

    async def _flood(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await read_body(receive)
        length = b"%d" % (FLOOD_CHUNK * FLOOD_CHUNKS)
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", length)]}
        )
        chunk = b"x" * FLOOD_CHUNK
        for _ in range(FLOOD_CHUNKS):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self.flood_sent += FLOOD_CHUNK
        await send({"type": "http.response.body", "body": b""})
        self.flood_done = True


async def read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def request(path: str, body: bytes = b"", *, method: str = "POST") -> bytes:
    head = b"%s %s HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n"
    return head % (method.encode(), path.encode(), len(body)) + body


def connect(server: ServerThread) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_response(sock: socket.socket, buffered: bytearray) -> tuple[bytes, bytes]:
    """One response with a Content-Length or chunked body off `sock`: (head, body)."""
    while b"\r\n\r\n" not in buffered:
        more = sock.recv(65536)
        assert more, f"connection closed before a head: {bytes(buffered)!r}"
        buffered += more
    end = buffered.index(b"\r\n\r\n") + 4
    head = bytes(buffered[:end])
    del buffered[:end]
    length = header_value(head, b"content-length")
    if length is not None:
        size = int(length)
        while len(buffered) < size:
            more = sock.recv(65536)
            assert more, "connection closed inside a body"
            buffered += more
        body = bytes(buffered[:size])
        del buffered[:size]
        return head, body
    while b"0\r\n\r\n" not in buffered:
        more = sock.recv(65536)
        assert more, "connection closed inside a chunked body"
        buffered += more
    end = buffered.index(b"0\r\n\r\n") + 5
    body = bytes(buffered[:end])
    del buffered[:end]
    return head, body


def header_value(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def read_to_close(sock: socket.socket, deadline_s: float = 10.0) -> bytes:
    out = b""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        more = sock.recv(65536)
        if not more:
            return out
        out += more
    raise AssertionError(f"the connection stayed open: {out[:200]!r}")
