"""A thinking model's replay round: the follow-up request repeats the round's assistant message
with its reasoning, in the field the upstream sent it in (SPEC §5; QUIRKS: Kimi thinking and
DeepSeek reject a tool-call turn without its `reasoning_content`), streaming and not; and a
non-streamed answer shows the earlier round's reasoning before the later one's, as a stream
would have shown it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.chat.exchange import ChatExchange
from proxy.core.events import Forward, OpenFollowup
from proxy.core.rounds import RouteRules

KIMI_ID = "functions.read_file:0"
ARGS = '{"path":"a.py"}'
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
HISTORY: dict[str, Any] = {
    "model": "kimi-k2-thinking",
    "tools": TOOLS,
    "messages": [
        {"role": "user", "content": "read a.py"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I should read it.",
            "tool_calls": [
                {
                    "id": KIMI_ID,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": ARGS},
                }
            ],
        },
        {"role": "tool", "tool_call_id": KIMI_ID, "content": "print(1)"},
    ],
}


def _exchange() -> ChatExchange:
    return ChatExchange(HISTORY, orjson.dumps(HISTORY), RouteRules(), entropy=lambda n: b"\xab" * n)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "kimi-k2-thinking",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _replay_stream(field: str) -> bytes:
    """The round replays the answered call after some thinking and a few words."""
    call = {"index": 0, "id": KIMI_ID, "type": "function"}
    return b"".join(
        [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({field: "The file was "}),
            _chunk({field: "read; read again."}),
            _chunk({"content": "Reading."}),
            _chunk(
                {"tool_calls": [{**call, "function": {"name": "read_file", "arguments": ARGS}}]}
            ),
            _chunk({}, "tool_calls"),
            b"data: [DONE]\n\n",
        ]
    )


def _feed_stream(exchange: ChatExchange, stream: bytes) -> list[Any]:
    """The stream's events; its `[DONE]` ends the round (no `end()` then)."""
    events: list[Any] = list(exchange.feed(stream))
    if exchange.phase.name == "RECEIVING":
        events += exchange.end()
    return events


def _followup_assistant(events: list[Any]) -> dict[str, Any]:
    (followup,) = [e for e in events if isinstance(e, OpenFollowup)]
    messages = orjson.loads(followup.body)["messages"]
    assert messages[-1]["role"] == "tool"  # the synthetic answer to the replay
    assistant: dict[str, Any] = messages[-2]
    assert assistant["role"] == "assistant" and assistant["tool_calls"]
    return assistant


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_streamed_replay_round_sends_its_reasoning_back(field: str) -> None:
    exchange = _exchange()
    exchange.begin_round(stream=True)
    events = _feed_stream(exchange, _replay_stream(field))
    assistant = _followup_assistant(events)
    assert assistant[field] == "The file was read; read again."
    assert assistant["content"] == "Reading."
    (other,) = {"reasoning_content", "reasoning"} - {field}
    assert other not in assistant  # sent back in the field it came in, and only there


def test_streamed_round_without_reasoning_adds_no_reasoning_field() -> None:
    exchange = _exchange()
    exchange.begin_round(stream=True)
    stream = _replay_stream("reasoning_content").replace(b'"reasoning_content"', b'"x_other"')
    assistant = _followup_assistant(_feed_stream(exchange, stream))
    assert "reasoning_content" not in assistant and "reasoning" not in assistant


def _completion(message: dict[str, Any], finish: str) -> bytes:
    return orjson.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": "kimi-k2-thinking",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
    )


def test_unstreamed_replay_round_sends_its_reasoning_back_and_shows_it_first() -> None:
    exchange = _exchange()
    exchange.begin_round(stream=False)
    call = {"id": KIMI_ID, "type": "function", "function": {"name": "read_file", "arguments": ARGS}}
    first = {
        "role": "assistant",
        "content": "Reading.",
        "reasoning_content": "Read it again.",
        "tool_calls": [call],
    }
    assert exchange.feed(_completion(first, "tool_calls")) == []
    assistant = _followup_assistant(exchange.end())
    assert assistant["reasoning_content"] == "Read it again."
    assert assistant["content"] == "Reading."

    exchange.begin_round(stream=False)
    last = {"role": "assistant", "content": " Done.", "reasoning_content": " It was read."}
    assert exchange.feed(_completion(last, "stop")) == []
    (final,) = exchange.end()
    assert isinstance(final, Forward) and final.last
    message = orjson.loads(final.data)["choices"][0]["message"]
    assert message["content"] == "Reading. Done."
    assert message["reasoning_content"] == "Read it again. It was read."
