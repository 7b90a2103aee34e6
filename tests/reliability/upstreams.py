"""Small misbehaving upstreams for the reliability tests, all on 127.0.0.1.

- `ScriptedUpstream`: an ASGI app whose answer to each path is a `Script` (status, headers,
  body pieces, how to end); it records every request it gets. Scripts can cut a body short,
  drip it one byte per write, or set cookies, so the proxy's handling of each is observable.
- `RawUpstream`: a TCP server that answers every connection with fixed bytes (no HTTP library
  in the way), for responses no server framework would produce.
"""

from __future__ import annotations

import asyncio
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.servers import ServerThread, serving

JSON_HEADERS = ((b"content-type", b"application/json"),)
SSE_HEADERS = ((b"content-type", b"text/event-stream"),)


@dataclass(frozen=True)
class Script:
    status: int = 200
    headers: tuple[tuple[bytes, bytes], ...] = JSON_HEADERS
    pieces: tuple[bytes, ...] = (b"{}",)
    drip: bool = False  # one byte per write
    cut: bool = False  # raise after the pieces: the server drops the connection mid-body
    # After the pieces, keep the body open until this is set (at most HOLD_LIMIT_S).
    hold: threading.Event | None = field(default=None, compare=False)
    # Lockstep: before each piece after the first, take one release of this (at most
    # HOLD_LIMIT_S each), so a test decides when the next write may go out.
    gate: threading.Semaphore | None = field(default=None, compare=False)
    head_delay: float = 0.0  # seconds before the response head: a provider slow to answer


HOLD_LIMIT_S = 10.0


@dataclass
class Seen:
    method: str
    path: str
    query: bytes
    headers: dict[str, str]
    body: bytes


def completion_body(content: str = "ok") -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": 1,
            "model": "scripted",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
    )


def sse_body(content: str = "ok") -> bytes:
    head = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def tool_calls(*calls: tuple[str, str, str]) -> list[dict[str, Any]]:
    """`(id, name, arguments)` triples as a message's `tool_calls`."""
    return [
        {"id": i, "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, name, arguments in calls
    ]


def answer(*calls: tuple[str, str, str], content: str | None = None, stream: bool) -> Script:
    """An upstream's answer: `content` (default "ok" when there are no calls), then `calls`,
    as a whole completion or as an event stream (a content delta, one delta per call, the
    finish)."""
    if not calls:
        text = "ok" if content is None else content
        if stream:
            return Script(headers=SSE_HEADERS, pieces=(sse_body(text),))
        return Script(pieces=(completion_body(text),))
    made = tool_calls(*calls)
    if not stream:
        message = {"role": "assistant", "content": content, "tool_calls": made}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        body = {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 1}
        return Script(pieces=(orjson.dumps({**body, "choices": [choice]}),))
    head = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1}
    deltas: list[dict[str, Any]] = [] if content is None else [{"content": content}]
    deltas += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(made)]
    chunks = [{**head, "choices": [{"index": 0, "delta": delta}]} for delta in deltas]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    events = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return Script(headers=SSE_HEADERS, pieces=(events + b"data: [DONE]\n\n",))


class _Cut(RuntimeError):
    """Raised after the scripted pieces: uvicorn then drops the connection mid-body."""


@dataclass
class ScriptedUpstream:
    scripts: dict[str, Script] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def default(self, path: str, stream: bool) -> Script:
        if path.endswith("/chat/completions"):
            return (
                Script(headers=SSE_HEADERS, pieces=(sse_body(),))
                if stream
                else Script(pieces=(completion_body(),))
            )
        return Script(pieces=(b'{"object":"list","data":[]}',))

    def pick(self, path: str, stream: bool) -> Script:
        """The script answering this request (it is already recorded in `seen`)."""
        return self.scripts.get(path) or self.default(path, stream)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        path = scope["path"]
        self.seen.append(Seen(scope["method"], path, scope["query_string"], headers, body))
        stream = False
        if body:
            try:
                parsed = orjson.loads(body)
                stream = isinstance(parsed, dict) and parsed.get("stream") is True
            except orjson.JSONDecodeError:
                pass
        script = self.pick(path, stream)
        if script.head_delay:
            await asyncio.sleep(script.head_delay)
        await send(
            {"type": "http.response.start", "status": script.status, "headers": script.headers}
        )
        for number, piece in enumerate(script.pieces):
            gate = script.gate if number else None
            if gate is not None and not await asyncio.to_thread(gate.acquire, True, HOLD_LIMIT_S):
                raise _Cut("the gate was not released in time")
            parts = [piece[i : i + 1] for i in range(len(piece))] if script.drip else [piece]
            for part in parts:
                await send({"type": "http.response.body", "body": part, "more_body": True})
                if script.drip:
                    await asyncio.sleep(0)
        if script.cut:
            raise _Cut("scripted cut")
        if script.hold is not None:
            await asyncio.to_thread(script.hold.wait, HOLD_LIMIT_S)
        await send({"type": "http.response.body", "body": b""})


@contextmanager
def scripted(scripts: dict[str, Script] | None = None) -> Iterator[tuple[ServerThread, Any]]:
    upstream = ScriptedUpstream(dict(scripts or {}))
    with serving(upstream) as server:
        yield server, upstream


@dataclass
class SequenceUpstream(ScriptedUpstream):
    """Answers the n-th chat completion with the n-th of `rounds`, and the last one again after
    them: an upstream whose answer changes from round to round (follow-up rounds, SPEC §5)."""

    rounds: tuple[Script, ...] = ()

    def pick(self, path: str, stream: bool) -> Script:
        if not path.endswith("/chat/completions") or not self.rounds:
            return super().pick(path, stream)
        count = sum(1 for seen in self.seen if seen.path == path)  # this request included
        return self.rounds[min(count, len(self.rounds)) - 1]

    def chat_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat completions it was sent, in order."""
        return [orjson.loads(s.body) for s in self.seen if s.path.endswith("/chat/completions")]


@contextmanager
def sequenced(*rounds: Script) -> Iterator[tuple[ServerThread, SequenceUpstream]]:
    upstream = SequenceUpstream(rounds=rounds)
    with serving(upstream) as server:
        yield server, upstream


class _RawHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 1 << 20:
            chunk = sock.recv(65536)
            if not chunk:
                return
            data += chunk
        server: RawUpstream = self.server  # type: ignore[assignment]
        server.requests += 1
        if server.answer:
            sock.sendall(server.answer)
        sock.shutdown(socket.SHUT_WR)


class RawUpstream(socketserver.ThreadingTCPServer):
    """Answers every request with `answer` verbatim and closes the connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answer: bytes) -> None:
        super().__init__(("127.0.0.1", 0), _RawHandler)
        self.answer = answer
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def raw_upstream(answer: bytes) -> Iterator[RawUpstream]:
    server = RawUpstream(answer)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
