"""A minimal HTTP/1.1 client for the soak: one connection per request, httptools parsing.

Independent of the proxy's own upstream transport on purpose (a bug shared by both sides
could hide itself), and cheap enough that hundreds of concurrent streams measure the proxy
rather than the load generator.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httptools

MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # no soak response is near this; a runaway one stops


@dataclass
class Reply:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    complete: bool = False  # the message ended as its framing said (not a dropped connection)
    error: str | None = None  # a transport failure on the client's side


class _Parser:
    def __init__(self) -> None:
        self.reply = Reply()
        self.chunks: list[bytes] = []
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.reply.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.reply.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.reply.complete = True


async def request(
    port: int,
    method: str,
    path: str,
    body: bytes,
    *,
    timeout: float,
    drop_after_first_body: bool = False,
) -> Reply:
    """Send one request to 127.0.0.1:port; read the whole response (or drop it early)."""
    parser = _Parser()
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            head = (
                f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            writer.write(head + body)
            received = 0
            while not parser.reply.complete:
                data = await reader.read(65536)
                if not data:
                    break
                received += len(data)
                if received > MAX_RESPONSE_BYTES:
                    parser.reply.error = "response too large"
                    break
                parser.parser.feed_data(data)
                if drop_after_first_body and parser.chunks:
                    break
    except TimeoutError:
        parser.reply.error = "client timeout"
    except (OSError, httptools.HttpParserError) as exc:
        parser.reply.error = f"{type(exc).__name__}: {exc}"
    finally:
        if writer is not None:
            writer.close()
    parser.reply.body = b"".join(parser.chunks)
    return parser.reply
