"""What a paced agent stream looks like on each API the proxy carries, both ways.

The upstream side: a stream's head events, one stamped text delta per tick (its text is
`t<CLOCK_MONOTONIC ns> `, the send time, so the client can tell how late it arrived), then a
tail that ends the text and streams one tool call under the id a Kimi-like server mints
(`functions.run_shell_command:0`), which the proxy must rewrite (SPEC §2, §8). The client side:
the request that asks for it, the stamps found in what arrived, and whether the reply is the
whole stream with the id as the side it came through should show it.

Events are serialized once into byte templates; a delta costs one `%` format, so the upstream
stays cheap next to the proxy it feeds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from bench.upstream import sse_event

APIS = ("chat", "anthropic", "responses")
PATHS = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}
TOOL = "run_shell_command"
RAW_ID = f"functions.{TOOL}:0"  # Kimi's numbering: never native, always rewritten (SPEC §2)
ARGUMENTS = ('{"command": ', '"ls -la ', "src/proxy", '"}')
MODEL = "kimi-k2-capacity"
# A stamp as it arrives: the quotes and the trailing space keep it from matching a final
# text that joins several of them (Responses' `.done` events repeat the whole text).
STAMP = re.compile(rb'"t(\d+) "')
STAMP_MAX_BYTES = 32  # a stamp's bytes, quotes included, with room to spare
_S = "\x00stamp\x00"  # placeholders swapped for %-format fields in the templates
_N = 987654321


def _template(event: bytes) -> bytes:
    """`event` with its placeholders turned into `%(stamp)d` and `%(seq)d` fields."""
    return (
        event.replace(b"%", b"%%")
        .replace(orjson.dumps(_S), b'"t%(stamp)d "')
        .replace(b"%d" % _N, b"%(seq)d")
    )


def _named(data: dict[str, Any]) -> bytes:
    """One Anthropic or Responses event: `event:` line and `data:` line."""
    return b"event: " + str(data["type"]).encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


@dataclass(frozen=True, slots=True)
class Script:
    """One API's paced stream: `head`, then `delta(stamp, seq)` per tick, then `tail(...)`."""

    api: str
    head: bytes
    delta_template: bytes
    first_seq: int  # the first delta's sequence number (Responses numbers its events)

    def delta(self, stamp_ns: int, seq: int) -> bytes:
        return self.delta_template % {b"stamp": stamp_ns, b"seq": seq}

    def tail(self, text: str, seq: int) -> bytes:
        """The end of the text (whose deltas joined are `text`) and the tool call."""
        if self.api == "chat":
            return _chat_tail()
        if self.api == "anthropic":
            return _anthropic_tail()
        return _responses_tail(text, seq)


def _chat_script() -> Script:
    head = sse_event({"role": "assistant", "content": ""})
    return Script("chat", head, _template(sse_event({"content": _S})), 0)


def _chat_tail() -> bytes:
    header = {"index": 0, "id": RAW_ID, "type": "function"}
    events = [sse_event({"tool_calls": [{**header, "function": {"name": TOOL, "arguments": ""}}]})]
    events += [
        sse_event({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        for piece in ARGUMENTS
    ]
    events.append(sse_event({}, "tool_calls") + b"data: [DONE]\n\n")
    return b"".join(events)


def _anthropic_script() -> Script:
    message: dict[str, Any] = {
        "id": "msg_capacity",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    head = _named({"type": "message_start", "message": message}) + _named(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    )
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": _S}}
    return Script("anthropic", head, _template(_named(delta)), 0)


def _anthropic_tail() -> bytes:
    block = {"type": "tool_use", "id": RAW_ID, "name": TOOL, "input": {}}
    events: list[dict[str, Any]] = [
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": block},
        *(
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": p},
            }
            for p in ARGUMENTS
        ),
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 100},
        },
        {"type": "message_stop"},
    ]
    return b"".join(_named(e) for e in events)


def _response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "resp_capacity",
        "object": "response",
        "created_at": 1700000000,
        "model": MODEL,
        "status": status,
        "output": output,
    }


_MESSAGE_REF = {"item_id": "msg_capacity", "output_index": 0, "content_index": 0}


def _message_item(status: str, text: str | None) -> dict[str, Any]:
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": []}]
    return {
        "type": "message",
        "id": "msg_capacity",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _responses_script() -> Script:
    part = {"type": "output_text", "text": "", "annotations": []}
    head_events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response("in_progress", [])},
        {"type": "response.in_progress", "response": _response("in_progress", [])},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": _message_item("in_progress", None),
        },
        {"type": "response.content_part.added", **_MESSAGE_REF, "part": part},
    ]
    head = b"".join(_named({**e, "sequence_number": n}) for n, e in enumerate(head_events))
    delta = {
        "type": "response.output_text.delta",
        **_MESSAGE_REF,
        "delta": _S,
        "sequence_number": _N,
    }
    return Script("responses", head, _template(_named(delta)), len(head_events))


def _responses_tail(text: str, seq: int) -> bytes:
    call = {"type": "function_call", "id": "fc_capacity", "call_id": RAW_ID, "name": TOOL}
    call_ref = {"item_id": "fc_capacity", "output_index": 1}
    arguments = "".join(ARGUMENTS)
    message = _message_item("completed", text)
    done_call = {**call, "arguments": arguments, "status": "completed"}
    part = {"type": "output_text", "text": text, "annotations": []}
    events: list[dict[str, Any]] = [
        {"type": "response.output_text.done", **_MESSAGE_REF, "text": text},
        {"type": "response.content_part.done", **_MESSAGE_REF, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**call, "arguments": "", "status": "in_progress"},
        },
        *(
            {"type": "response.function_call_arguments.delta", **call_ref, "delta": p}
            for p in ARGUMENTS
        ),
        {"type": "response.function_call_arguments.done", **call_ref, "arguments": arguments},
        {"type": "response.output_item.done", "output_index": 1, "item": done_call},
        {"type": "response.completed", "response": _response("completed", [message, done_call])},
    ]
    return b"".join(_named({**e, "sequence_number": seq + n}) for n, e in enumerate(events))


SCRIPTS = {
    "chat": _chat_script(),
    "anthropic": _anthropic_script(),
    "responses": _responses_script(),
}


def scan_stamps(body: bytes | bytearray, start: int) -> tuple[list[int], int]:
    """The send times of the stamps complete in `body` from `start` on, and where the next
    scan starts: past the last stamp found, but never later than a stamp's length before
    the end, so a stamp split across reads is found once it is whole (and only once)."""
    found = []
    end = start
    for match in STAMP.finditer(body, start):
        found.append(int(match.group(1)))
        end = match.end()
    return found, max(end, len(body) - STAMP_MAX_BYTES, start)


def stamp_text(stamp_ns: int) -> str:
    """A delta's text as `Script.delta` writes it (the Responses tail repeats them joined)."""
    return f"t{stamp_ns} "


def request_body(api: str) -> dict[str, Any]:
    """A first-turn agent request offering the shell tool, streamed."""
    user = {"role": "user", "content": "Look around the repository."}
    params = {"type": "object", "properties": {"command": {"type": "string"}}}
    if api == "chat":
        tool = {"type": "function", "function": {"name": TOOL, "parameters": params}}
        return {"model": MODEL, "messages": [user], "tools": [tool], "stream": True}
    if api == "anthropic":
        tool = {"name": TOOL, "input_schema": params}
        return {
            "model": MODEL,
            "max_tokens": 4096,
            "messages": [user],
            "tools": [tool],
            "stream": True,
        }
    tool = {"type": "function", "name": TOOL, "parameters": params}
    return {"model": MODEL, "input": [user], "tools": [tool], "stream": True}


def request_bytes(api: str, port: int) -> bytes:
    payload = orjson.dumps(request_body(api))
    return (
        b"POST %b HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"accept: text/event-stream\r\nanthropic-version: 2023-06-01\r\n"
        b"content-length: %d\r\n\r\n%b" % (PATHS[api].encode(), port, len(payload), payload)
    )


# How each API's stream ends, and how its tool call's id reads raw and rewritten (SPEC §8:
# `call_...` on Chat and as the Responses `call_id`, `toolu_...` on Anthropic).
_END = {"chat": b"data: [DONE]", "anthropic": b"message_stop", "responses": b"response.completed"}
_ID_KEY = {"chat": b'"id":"', "anthropic": b'"id":"', "responses": b'"call_id":"'}
_MINTED = {"chat": b"call_", "anthropic": b"toolu_", "responses": b"call_"}


def check_reply(
    api: str, status: int, body: bytes, deltas: int, stamps: int, rewrites: bool
) -> str | None:
    """None when the reply is the whole paced stream with the tool call's id as expected
    (`rewrites`: minted by the proxy; else the upstream's raw id); else what is wrong."""
    if status != 200:
        return f"HTTP {status}: {body[:200]!r}"
    if stamps != deltas:
        return f"{stamps} stamped deltas of {deltas}"
    if body.rfind(_END[api]) < 0:
        return "the stream did not end"
    expected = _ID_KEY[api] + (_MINTED[api] if rewrites else RAW_ID.encode())
    if body.find(expected) < 0:
        return "the tool call's id was not rewritten" if rewrites else "the raw id did not arrive"
    return None
