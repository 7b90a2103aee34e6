"""What the client sees, read off the wire: SSE events, error bodies, metrics, raw sockets."""

from __future__ import annotations

import contextlib
import re
import socket
import time
from typing import Any

import httpx
import orjson

from tests.reliability.invariants import parse_sse_output
from tests.servers import ServerThread

USER = [{"role": "user", "content": "hi"}]


def chat(server: ServerThread, model: str, *, stream: bool, **extra: Any) -> httpx.Response:
    body = {"model": model, "stream": stream, "messages": USER, **extra}
    return httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30)


def data_events(raw: bytes) -> list[bytes]:
    """The data payloads of a stream the proxy sent, after checking its framing strictly."""
    return [e.data for e in parse_sse_output(raw) if e.data is not None]


def error_event(raw: bytes) -> dict[str, Any]:
    """SPEC §6 in a stream: the last event is `data: {"error": ...}` and no [DONE] is sent."""
    events = data_events(raw)
    assert events, "empty stream"
    assert b"[DONE]" not in events, "a stream that ends with an error must not send [DONE]"
    error = orjson.loads(events[-1])["error"]
    assert set(error) == {"message", "type", "code", "param"}, error
    assert isinstance(error["message"], str) and error["message"]
    return error  # type: ignore[no-any-return]


def error_body(response: httpx.Response) -> dict[str, Any]:
    """SPEC §6 outside a stream: an OpenAI-shaped JSON error body."""
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code", "param"}, error
    return error  # type: ignore[no-any-return]


def no_traceback(body: bytes) -> None:
    for marker in (b"Traceback", b'File "', b"Error:\n", b"site-packages"):
        assert marker not in body, f"a traceback leaked into a response body: {body[:300]!r}"


def reassemble(raw: bytes) -> dict[str, Any]:
    """A stream as the client's final message: content, tool calls by index, finish reason."""
    content: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for data in data_events(raw):
        if data == b"[DONE]" or not data.startswith(b"{"):
            continue  # a tolerant client skips data that is not a chunk
        chunk = orjson.loads(data)
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                slot["id"] += call.get("id") or ""
                fn = call.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return {"content": "".join(content), "calls": calls, "finish": finish}


def keeps_serving(server: ServerThread) -> None:
    """Right after a fault, a normal streaming tool-call request through the same proxy works."""
    response = chat(server, "kimi", stream=True)
    assert response.status_code == 200
    result = reassemble(response.content)
    assert data_events(response.content)[-1] == b"[DONE]"
    assert result["finish"] == "tool_calls" and result["calls"][0]["name"]


def metric(server: ServerThread, name: str, **labels: str) -> float:
    """One sample of /metrics (0 when absent)."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        match = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if match is None or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(3))
    return 0.0


def raw_exchange(port: int, request: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes, read until the server closes or one full response arrived."""
    deadline = time.monotonic() + timeout
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with contextlib.suppress(OSError):  # the server may answer and close mid-send
            sock.sendall(request)
        received = b""
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            received += chunk
            head, sep, body = received.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            if sep and length and len(body) >= int(length.group(1)):
                break
        return received


def status_of(response: bytes) -> int:
    match = re.match(rb"HTTP/1\.[01] (\d{3})", response)
    assert match, f"not an HTTP response: {response[:100]!r}"
    return int(match.group(1))


def upstream_events(raw: bytes) -> list[bytes]:
    """Data payloads of any upstream stream, in whatever framing it used (SPEC §4)."""
    from proxy.core.sse import SSEDecoder

    decoder = SSEDecoder()
    events = decoder.feed(raw) + decoder.end()
    return [e.data for e in events if e.data is not None]


def reassemble_any(raw: bytes) -> dict[str, Any]:
    """`reassemble` for an upstream's own stream (tolerant framing, non-JSON lines skipped)."""
    lines = []
    for data in upstream_events(raw):
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError:
            if data.strip() != b"[DONE]":
                continue
        lines.append(b"data: " + data + b"\n\n")
    return reassemble(b"".join(lines))
