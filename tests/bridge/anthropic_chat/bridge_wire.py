"""Helpers for the Anthropic-over-Chat bridge's tests: Chat upstream chunks, a driver that
plays the shell's round loop (sans-IO), and the client's Anthropic events parsed back."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx2

from proxy.bridge.anthropic_chat import AnthropicOverChat, new_anthropic_over_chat
from proxy.core.events import Forward, LoopDetected, OpenFollowup, UpstreamBroken
from proxy.core.rounds import RouteRules

JSON = dict[str, Any]
FIXTURES = Path(__file__).resolve().parents[2] / "agents" / "claude_code" / "requests"
BASH_SCHEMA: JSON = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}
BASH_TOOL: JSON = {"name": "Bash", "description": "Run a command", "input_schema": BASH_SCHEMA}


def claude_code_request(name: str) -> JSON:
    """A recorded Claude Code request body (tests/agents/claude_code/requests)."""
    body: JSON = json.loads((FIXTURES / f"{name}.json").read_text())["body"]
    return body


def entropy(n: int) -> bytes:
    """Fixed randomness: the same input always gives the same output bytes."""
    return bytes([0xAB]) * n


def new_exchange(body: JSON, rules: RouteRules | None = None) -> AnthropicOverChat:
    return new_anthropic_over_chat(body, b"", rules or RouteRules(), entropy)


def chunk(
    delta: JSON | None = None,
    finish: str | None = None,
    *,
    usage: JSON | None = None,
    model: str = "kimi-k2",
) -> bytes:
    """One Chat stream event (a usage chunk has `choices: []`)."""
    body: JSON = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1}
    body["model"] = model
    body["choices"] = [] if usage else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def call_header(index: int, call_id: str, name: str, arguments: str = "") -> bytes:
    call = {"index": index, "id": call_id, "type": "function"}
    call["function"] = {"name": name, "arguments": arguments}
    return chunk({"tool_calls": [call]})


def call_args(index: int, fragment: str) -> bytes:
    return chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})


def chat_stream(*events: bytes, usage: JSON | None = None) -> bytes:
    tail = chunk(usage=usage) if usage else b""
    return b"".join(events) + tail + b"data: [DONE]\n\n"


def completion(message: JSON, finish: str, usage: JSON | None = None) -> bytes:
    body: JSON = {"id": "chatcmpl-9", "object": "chat.completion", "created": 1}
    body["model"] = "kimi-k2"
    body["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    if usage:
        body["usage"] = usage
    return json.dumps(body).encode()


@dataclass
class Played:
    """What the shell would have done: the client's bytes, the follow-up requests it sent
    upstream, and the error that ended the response, if any."""

    client: bytes = b""
    followups: list[JSON] = field(default_factory=list)
    loop: LoopDetected | None = None
    broken: UpstreamBroken | None = None


def play(
    exchange: AnthropicOverChat,
    rounds: list[bytes],
    *,
    stream: bool = True,
    pieces: Callable[[bytes], list[bytes]] | None = None,
) -> Played:
    """The shell's round loop over canned upstream bodies, one per round."""
    played = Played()
    for body in rounds:
        exchange.begin_round(stream=stream)
        events: list[Any] = []
        for piece in (pieces or (lambda b: [b]))(body):
            events.extend(exchange.feed(piece))
            if any(
                isinstance(e, Forward | OpenFollowup | LoopDetected | UpstreamBroken)
                for e in events
            ):
                break
        else:
            events.extend(exchange.end())
        step = _act(exchange, events, played)
        if not isinstance(step, OpenFollowup):
            return played
        played.followups.append(json.loads(step.body))
    raise AssertionError("the exchange asked for more rounds than the test gave")


def _act(exchange: AnthropicOverChat, events: list[Any], played: Played) -> object:
    for event in events:
        if isinstance(event, bytes):
            played.client += event
        elif isinstance(event, Forward):
            played.client += event.data
            if event.last:
                return None
        elif isinstance(event, OpenFollowup):
            return event
        elif isinstance(event, LoopDetected):
            played.loop = event
            played.client += exchange.stream_error(event.error)
            return None
        elif isinstance(event, UpstreamBroken):
            played.broken = event
            return None
    return None


def parse_events(data: bytes) -> list[JSON]:
    """The client's Anthropic events, each checked to name its type in its `event:` line
    (the anthropic SDKs dispatch on that line)."""
    events: list[JSON] = []
    for raw in data.decode().split("\n\n"):
        lines = [line for line in raw.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        name = next(line[len("event: ") :] for line in lines if line.startswith("event: "))
        payload = "".join(line[len("data: ") :] for line in lines if line.startswith("data: "))
        event: JSON = json.loads(payload)
        assert event["type"] == name
        events.append(event)
    return events


def sdk_final_message(client_bytes: bytes, request: JSON) -> JSON:
    """What the anthropic SDK's `messages.stream(...).get_final_message()` accumulates from
    these bytes, served offline through a MockTransport (the SDK's own httpx2)."""

    def answer(_: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, content=client_bytes)

    transport = httpx2.MockTransport(answer)
    with httpx2.Client(transport=transport) as http:
        client = anthropic.Anthropic(
            api_key="test", base_url="http://127.0.0.1:9", http_client=http, max_retries=0
        )
        with client.messages.stream(**request) as stream:
            message: JSON = stream.get_final_message().to_dict(mode="json")
    return message
