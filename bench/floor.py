"""The framework floor: uvicorn, run as the proxy runs it, with a raw ASGI app that answers
the benchmark's requests itself (no upstream, no JSON work).

Whatever the proxy adds beyond this row is its own work; what this row adds over direct is
the server's, which no change to the proxy's handlers can remove. It runs the HTTP protocol the
proxy runs (`OpenAIErrorHttpProtocol`), so the floor stays a fair reference.
Run as `python -m bench.floor PORT`.
"""

from __future__ import annotations

import sys
from typing import Any

from bench.upstream import FAST_RESPONSE, SMALL_COMPLETION, TOOLCALL_RESPONSE


def _dechunk(data: bytes) -> bytes:
    """The canned chunked body as plain bytes (uvicorn does its own chunking)."""
    out = bytearray()
    while True:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return bytes(out)
        out += rest[:size]
        data = rest[size + 2 :]


STREAM = _dechunk(FAST_RESPONSE.split(b"\r\n\r\n", 1)[1])
TOOLCALL_STREAM = _dechunk(TOOLCALL_RESPONSE.split(b"\r\n\r\n", 1)[1])
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if b'"stream":true' in body:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        stream = TOOLCALL_STREAM if b"bench-kimi" in body else STREAM
        await send({"type": "http.response.body", "body": stream})
    else:
        headers = [*JSON_HEADERS, (b"content-length", str(len(SMALL_COMPLETION)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": SMALL_COMPLETION})


def main(argv: list[str]) -> int:
    import argparse

    import uvicorn

    from proxy.server.draining import OpenAIErrorHttpProtocol

    parser = argparse.ArgumentParser(prog="python -m bench.floor")
    parser.add_argument("port", type=int)
    args = parser.parse_args(argv)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http=OpenAIErrorHttpProtocol,  # as proxy.cli.main runs it
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # as proxy.cli.main runs it
        server_header=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
