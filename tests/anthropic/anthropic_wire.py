"""Anthropic Messages test helpers: upstream events to feed, and a strict reader of what the
client receives (the grammar of SPEC §8 checked on every stream a test reads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.reads import reads_of
from proxy.anthropic.exchange import AnthropicExchange
from proxy.core.events import Forward, LoopDetected, OpenFollowup, UpstreamBroken
from proxy.core.rounds import RouteRules

JSON = dict[str, Any]
TOOLS = [
    {"name": "Bash", "input_schema": {"type": "object"}},
    {"name": "grep", "input_schema": {"type": "object"}},
]


def ev(data: JSON, *, named: bool = True) -> bytes:
    head = b"event: " + data["type"].encode() + b"\n" if named else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def start(msg_id: str = "msg_up1", input_tokens: int = 10) -> bytes:
    message = {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "kimi-k2",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    return ev({"type": "message_start", "message": message})


def text(index: int, *pieces: str, stop: bool = True) -> bytes:
    out = [
        ev(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            }
        )
    ]
    out += [
        ev(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": p},
            }
        )
        for p in pieces
    ]
    if stop:
        out.append(ev({"type": "content_block_stop", "index": index}))
    return b"".join(out)


def thinking(index: int, thought: str, signature: str) -> bytes:
    """A thinking block with its signature, as Claude models stream one."""
    block = {"type": "thinking", "thinking": "", "signature": ""}
    deltas = [
        {"type": "thinking_delta", "thinking": thought},
        {"type": "signature_delta", "signature": signature},
    ]
    return (
        ev({"type": "content_block_start", "index": index, "content_block": block})
        + b"".join(ev({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas)
        + ev({"type": "content_block_stop", "index": index})
    )


def tool(
    index: int,
    raw_id: object,
    name: str,
    args: JSON,
    *,
    whole: bool = False,
    deltas: bool = True,
    stop: bool = True,
    pieces: int = 3,
) -> bytes:
    block: JSON = {"type": "tool_use", "id": raw_id, "name": name, "input": args if whole else {}}
    out = [ev({"type": "content_block_start", "index": index, "content_block": block})]
    if deltas:
        text_ = orjson.dumps(args).decode()
        size = max(1, -(-len(text_) // pieces))
        for i in range(0, len(text_), size):
            delta = {"type": "input_json_delta", "partial_json": text_[i : i + size]}
            out.append(ev({"type": "content_block_delta", "index": index, "delta": delta}))
    if stop:
        out.append(ev({"type": "content_block_stop", "index": index}))
    return b"".join(out)


def end(reason: str | None = "tool_use", output_tokens: int = 5, *, stop: bool = True) -> bytes:
    delta = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None}}
    out = ev({**delta, "usage": {"output_tokens": output_tokens}})
    return out + (ev({"type": "message_stop"}) if stop else b"")


def whole_message(
    *content: JSON,
    msg_id: str = "msg_up",
    reason: str | None = "tool_use",
    input_tokens: int = 50,
    output_tokens: int = 5,
    **extra: Any,
) -> JSON:
    """A non-streamed answer of a Kimi-like upstream with these blocks (`extra` last)."""
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "kimi-k2",
        "content": list(content),
        "stop_reason": reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        **extra,
    }


def request(*messages: JSON, model: str = "kimi-k2", stream: bool = True, **extra: Any) -> JSON:
    return {
        "model": model,
        "max_tokens": 1024,
        "stream": stream,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "go"}, *messages],
        **extra,
    }


def assistant(*blocks: JSON) -> JSON:
    return {"role": "assistant", "content": list(blocks)}


def tool_use(tool_id: str, name: str, args: JSON) -> JSON:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": args}


def results(*tool_ids: str) -> JSON:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": t, "content": "ok"} for t in tool_ids],
    }


def parse(data: bytes) -> list[tuple[str | None, JSON | str]]:
    """(event name, data) per event; a comment is (None, its text)."""
    out: list[tuple[str | None, JSON | str]] = []
    for chunk in data.decode().split("\n\n"):
        if not chunk.strip():
            continue
        lines = chunk.split("\n")
        name = next((ln[7:] for ln in lines if ln.startswith("event: ")), None)
        payload = "\n".join(ln[6:] for ln in lines if ln.startswith("data: "))
        if payload:
            out.append((name, orjson.loads(payload)))
        else:
            out.append((None, "\n".join(lines)))
    return out


@dataclass
class Received:
    events: list[JSON]
    message: JSON  # assembled as an SDK does
    error: JSON | None = None
    comments: list[str] = field(default_factory=list)

    @property
    def tools(self) -> list[JSON]:
        return [b for b in self.message["content"] if b["type"] == "tool_use"]

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]


def _assemble_block(
    message: JSON, data: JSON, open_index: list[int | None], buffers: dict[int, str]
) -> None:
    kind = data["type"]
    index = data.get("index")
    if kind == "content_block_start":
        assert open_index[0] is None, f"block {index} started while {open_index[0]} is open"
        assert index == len(message["content"]), f"index {index} is not dense"
        block = dict(data["content_block"])
        if block["type"] == "tool_use":
            assert block["input"] == {}, block
        message["content"].append(block)
        open_index[0] = index
        buffers[index] = ""
    elif kind == "content_block_delta":
        assert index == open_index[0], f"delta for {index} while {open_index[0]} is open"
        block, delta = message["content"][index], data["delta"]
        if delta["type"] == "input_json_delta":
            buffers[index] += delta["partial_json"]
        elif delta["type"] == "text_delta":
            block["text"] += delta["text"]
        elif delta["type"] == "thinking_delta":
            block["thinking"] += delta["thinking"]
        elif delta["type"] == "signature_delta":
            block["signature"] += delta["signature"]
    else:  # content_block_stop
        assert index == open_index[0], f"stop for {index} while {open_index[0]} is open"
        block = message["content"][index]
        if block["type"] == "tool_use":
            block["input"] = orjson.loads(buffers[index])
            assert isinstance(block["input"], dict)
        open_index[0] = None


def read(data: bytes) -> Received:
    """The client's stream, checked against SPEC §8's grammar and assembled."""
    events = parse(data)
    message: JSON | None = None
    received = Received([], {})
    open_index: list[int | None] = [None]
    buffers: dict[int, str] = {}
    for name, item in events:
        if name is None:
            assert isinstance(item, str)
            received.comments.append(item)
            continue
        assert isinstance(item, dict) and name == item["type"], (name, item)
        assert received.error is None, "nothing may follow an error event"
        received.events.append(item)
        kind = item["type"]
        if kind == "message_start":
            assert message is None, "a second message_start"
            # As the SDKs do: blocks that came whole in message_start are the first blocks.
            message = dict(item["message"])
            message["content"] = [dict(b) for b in message.get("content") or []]
        elif kind.startswith("content_block_"):
            assert message is not None
            _assemble_block(message, item, open_index, buffers)
        elif kind == "message_delta":
            assert message is not None and open_index[0] is None
            assert "stop_sequence" in item["delta"] and "output_tokens" in item["usage"]
            message.update(item["delta"])
            message["usage"] = {**message["usage"], **item["usage"]}
        elif kind == "message_stop":
            assert received.types().count("message_stop") == 1
            assert received.types()[-2] == "message_delta"
        elif kind == "error":
            received.error = item
    assert message is not None, "no message_start"
    received.message = message
    if received.error is None:
        assert received.events[-1]["type"] == "message_stop", received.types()
    return received


@dataclass
class Run:
    client: bytes = b""
    followups: list[JSON] = field(default_factory=list)
    loop: LoopDetected | None = None
    broken: UpstreamBroken | None = None  # SPEC §4: a line that is not JSON inside a call
    exchange: AnthropicExchange | None = None

    def read(self) -> Received:
        return read(self.client)


def entropy(n: int) -> bytes:
    return b"\xab" * n


def run(
    body: JSON,
    rounds: list[bytes],
    rules: RouteRules | None = None,
    *,
    read_size: int | None = None,
    paced: bool = False,
) -> Run:
    """Drive an exchange through upstream rounds as the shell does (streaming): each round
    in reads of `read_size` bytes (one read: None), or one event a read (`paced`)."""
    exchange = AnthropicExchange(body, orjson.dumps(body), rules or RouteRules(), entropy)
    result = Run(exchange=exchange)
    for data in rounds:
        exchange.begin_round(stream=True)
        events = []
        for read in (
            reads_of(data, paced=True) if paced else _cut(data, read_size or len(data) or 1)
        ):
            events += exchange.feed(read)
            if any(not isinstance(e, bytes) for e in events):
                break
        else:
            events += exchange.end()
        step = _act(result, events, exchange)
        if step != "followup":
            return result
    raise AssertionError("the exchange asked for more rounds than the test gave")


def _cut(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _act(result: Run, events: list[Any], exchange: AnthropicExchange) -> str:
    outcome = "more"
    for event in events:
        if isinstance(event, bytes):
            result.client += event
        elif isinstance(event, Forward):
            result.client += event.data
            outcome = "done"
        elif isinstance(event, OpenFollowup):
            result.followups.append(orjson.loads(event.body))
            outcome = "followup"
        elif isinstance(event, LoopDetected):
            result.loop = event
            result.client += exchange.stream_error(event.error)
            outcome = "done"
        elif isinstance(event, UpstreamBroken):
            result.broken = event
            result.client += exchange.stream_error(event.error)
            outcome = "done"
        else:
            raise AssertionError(event)
    return outcome


def run_message(
    body: JSON, rounds: list[JSON], rules: RouteRules | None = None
) -> tuple[Any, list[JSON]]:
    """Drive a non-streaming exchange; the final event and the follow-up bodies."""
    exchange = AnthropicExchange(body, orjson.dumps(body), rules or RouteRules(), entropy)
    followups: list[JSON] = []
    for message in rounds:
        exchange.begin_round(stream=False)
        assert exchange.feed(orjson.dumps(message)) == []
        [event] = exchange.end()
        if isinstance(event, OpenFollowup):
            followups.append(orjson.loads(event.body))
            continue
        return event, followups
    raise AssertionError("the exchange asked for more rounds than the test gave")
