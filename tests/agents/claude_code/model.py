"""A tiny scripted Anthropic Messages upstream that records what its client sends: the
recorder behind the Claude Code request fixtures (`record.py`) and the probe of how Claude
Code treats each form of error (`tests/agents/test_claude_code.py`).

It is not the simulated provider: its replies are written out block by block here (a thinking
block with a signature, parallel `tool_use` blocks, an error in one of several forms), so a
recording shows exactly how Claude Code sends each of them back. The round is the number of
assistant messages in the request, so a client's re-send of a request gets the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.server.asgi import Receive, Scope, Send

JSON = dict[str, Any]
LOOP_MESSAGE = "Tool-call replay loop detected (scripted)"


@dataclass(frozen=True)
class Recorded:
    path: str  # with its query string
    headers: dict[str, str]
    body: JSON

    @property
    def round(self) -> int:
        messages = self.body.get("messages")
        return sum(
            1 for m in messages or [] if isinstance(m, dict) and m.get("role") == "assistant"
        )

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True


# One round's answer: content blocks (a message), or the name of an error form.
Turn = list[JSON] | str
ERROR_FORMS = ("http_422", "stream_error", "stream_block_error")


def _sse(event: str, data: JSON) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _message(model: str, number: int) -> JSON:
    return {
        "id": f"msg_scripted_{number}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }


def _block_events(index: int, block: JSON) -> bytes:
    kind = block["type"]
    if kind == "text":
        start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        deltas = [delta]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    else:  # tool_use
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        partial = orjson.dumps(block["input"]).decode()
        deltas = [{"type": "input_json_delta", "partial_json": partial}]
    out = _sse(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": start},
    )
    for delta in deltas:
        out += _sse(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )
    return out + _sse("content_block_stop", {"type": "content_block_stop", "index": index})


def message_stream(blocks: list[JSON], model: str, number: int) -> bytes:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    out = _sse("message_start", {"type": "message_start", "message": _message(model, number)})
    for index, block in enumerate(blocks):
        out += _block_events(index, block)
    delta = {"stop_reason": stop, "stop_sequence": None}
    out += _sse(
        "message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 5}}
    )
    return out + _sse("message_stop", {"type": "message_stop"})


def error_body(message: str = LOOP_MESSAGE) -> JSON:
    return {"type": "error", "error": {"type": "loop_detected", "message": message}}


def error_stream(form: str, model: str, number: int) -> bytes:
    """An event stream that ends with Anthropic's `error` event: right after `message_start`
    (`stream_error`), or after one completed (empty) text block (`stream_block_error`)."""
    out = _sse("message_start", {"type": "message_start", "message": _message(model, number)})
    if form == "stream_block_error":
        start = {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": ""},
        }
        out += _sse("content_block_start", start)
        out += _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    return out + _sse("error", error_body())


def as_json(status: int, body: JSON) -> tuple[int, bytes, bytes]:
    return status, b"application/json", orjson.dumps(body)


@dataclass
class ScriptedModel:
    """Raw ASGI app: `POST /v1/messages` answered from `turns` (the last one repeats),
    `count_tokens` with a small count, anything else 404. Every request is recorded."""

    turns: list[Turn]
    recorded: list[Recorded] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            event = await receive()
            body += event.get("body", b"")
            more = event.get("more_body", False)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        query = scope.get("query_string", b"").decode()
        path = scope["path"] + (f"?{query}" if query else "")
        parsed = orjson.loads(body) if body else {}
        self.recorded.append(Recorded(path, headers, parsed))
        status, content_type, payload = self._answer(scope["path"], self.recorded[-1])
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    def _answer(self, path: str, request: Recorded) -> tuple[int, bytes, bytes]:
        if path.endswith("/count_tokens"):
            return as_json(200, {"input_tokens": 10})
        if not path.endswith("/v1/messages"):
            return as_json(
                404, {"type": "error", "error": {"type": "not_found_error", "message": path}}
            )
        turn = self.turns[min(request.round, len(self.turns) - 1)]
        model, number = str(request.body.get("model")), len(self.recorded)
        if isinstance(turn, str):
            # Without streaming every form is the HTTP 422 the proxy answers then.
            if turn == "http_422" or not request.stream:
                return as_json(422, error_body())
            return 200, b"text/event-stream", error_stream(turn, model, number)
        if request.stream:
            return 200, b"text/event-stream", message_stream(turn, model, number)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in turn) else "end_turn"
        return as_json(200, _message(model, number) | {"content": turn, "stop_reason": stop})
