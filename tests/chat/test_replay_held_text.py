"""A replay-only round's text, all of it, streamed as not streamed (SPEC §5: the follow-up's
answer continues the same message, nothing lost; the follow-up request repeats the round's
assistant message).

The text-call scanner holds back what may still become a call (SPEC §8): a `<` or `[` that
may open markup, whitespace before anything else (the whole message may be one JSON call), a
JSON value that may be one. It lets that go when the choice finishes, which is also where the
round turns out to be replay-only. What it lets go there must reach the client and the
follow-up request, as the non-streamed path keeps the message's content whole.
"""

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
    "model": "kimi-k2",
    "tools": TOOLS,
    "messages": [
        {"role": "user", "content": "read a.py"},
        {
            "role": "assistant",
            "content": "",
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
REPLAY = {"id": KIMI_ID, "type": "function", "function": {"name": "read_file", "arguments": ARGS}}
LATER = "Done."

# The round's text as the upstream streams it, in pieces: each ends in what the scanner holds.
TEXTS = {
    "a `<` that may open markup": ["Let me check <"],
    "a `<` of its own": ["Let me check ", "<"],
    "a `[` that may open markup": ["See ", "["],
    "whitespace only": ["\n", "\n "],
    "a JSON value that is no call": ['{"note": ', '"a.py"}'],
    "plain text": ["Reading ", "it."],  # nothing held: the finish chunk's own text, if any
}


def _exchange() -> ChatExchange:
    return ChatExchange(HISTORY, orjson.dumps(HISTORY), RouteRules(), entropy=lambda n: b"\xab" * n)


def _event(delta: dict[str, Any], finish: str | None = None, cid: str = "c1") -> bytes:
    chunk = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "kimi-k2",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _replay_round(pieces: list[str], ending: str) -> list[bytes]:
    """The round's events: its text, the replayed call, then its end by `ending`:
    `finish` a finish chunk and `[DONE]`; `finish with text` the last piece in the finish
    chunk itself; `none` the body just ends (SPEC §4: the proxy completes it)."""
    last = pieces[-1] if ending == "finish with text" else None
    texts = pieces[:-1] if last is not None else pieces
    call = {"index": 0, **REPLAY}
    events = [_event({"role": "assistant", "content": ""})]
    events += [_event({"content": piece}) for piece in texts]
    events.append(_event({"tool_calls": [call]}))
    if ending == "none":
        return events
    events.append(_event({} if last is None else {"content": last}, "tool_calls"))
    return [*events, b"data: [DONE]\n\n"]


def _later_round() -> list[bytes]:
    return [
        _event({"role": "assistant", "content": ""}, cid="c2"),
        _event({"content": LATER}, cid="c2"),
        _event({}, "stop", cid="c2"),
        b"data: [DONE]\n\n",
    ]


def _stream_round(exchange: ChatExchange, events: list[bytes], reads: str) -> list[Any]:
    exchange.begin_round(stream=True)
    out: list[Any] = []
    for read in events if reads == "events" else [b"".join(events)]:
        out += exchange.feed(read)
    if exchange.phase.name == "RECEIVING":
        out += exchange.end()
    return out


def _client_bytes(events: list[Any]) -> bytes:
    return b"".join(
        e if isinstance(e, bytes) else e.data for e in events if isinstance(e, bytes | Forward)
    )


def _chunks(data: bytes) -> list[dict[str, Any]]:
    return [
        orjson.loads(block[6:])
        for block in data.split(b"\n\n")
        if block.startswith(b"data: {") and b'"error"' not in block[:20]
    ]


def _followup_content(events: list[Any]) -> str:
    (followup,) = [e for e in events if isinstance(e, OpenFollowup)]
    assistant = orjson.loads(followup.body)["messages"][-2]
    assert assistant["role"] == "assistant" and assistant["tool_calls"]
    content: str = assistant["content"]
    return content


def _streamed(pieces: list[str], ending: str, reads: str) -> tuple[str, str, list[Any]]:
    """The client's content over both rounds, the follow-up's assistant content, and every
    finish_reason the client saw."""
    exchange = _exchange()
    first = _stream_round(exchange, _replay_round(pieces, ending), reads)
    repeated = _followup_content(first)
    later = _stream_round(exchange, _later_round(), reads)
    chunks = _chunks(_client_bytes(first + later))
    content = "".join(
        choice["delta"].get("content") or "" for chunk in chunks for choice in chunk["choices"]
    )
    finishes = [
        choice["finish_reason"]
        for chunk in chunks
        for choice in chunk["choices"]
        if choice["finish_reason"] is not None
    ]
    return content, repeated, finishes


def _completion(message: dict[str, Any], finish: str, cid: str) -> bytes:
    return orjson.dumps(
        {
            "id": cid,
            "object": "chat.completion",
            "created": 1,
            "model": "kimi-k2",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
    )


def _unstreamed(pieces: list[str]) -> tuple[str, str]:
    """The client's content and the follow-up's assistant content, not streamed."""
    exchange = _exchange()
    exchange.begin_round(stream=False)
    first = {"role": "assistant", "content": "".join(pieces), "tool_calls": [REPLAY]}
    assert exchange.feed(_completion(first, "tool_calls", "c1")) == []
    repeated = _followup_content(exchange.end())
    exchange.begin_round(stream=False)
    assert exchange.feed(_completion({"role": "assistant", "content": LATER}, "stop", "c2")) == []
    (final,) = exchange.end()
    assert isinstance(final, Forward) and final.last
    content: str = orjson.loads(final.data)["choices"][0]["message"]["content"]
    return content, repeated


@pytest.mark.parametrize("reads", ["whole", "events"])
@pytest.mark.parametrize("ending", ["finish", "finish with text", "none"])
@pytest.mark.parametrize("pieces", list(TEXTS.values()), ids=list(TEXTS))
def test_held_text_of_a_replay_round_reaches_the_client_and_the_follow_up(
    pieces: list[str], ending: str, reads: str
) -> None:
    text = "".join(pieces)
    content, repeated, finishes = _streamed(pieces, ending, reads)
    assert (content, repeated) == (text + LATER, text)
    # the replay round's finish is not forwarded (SPEC §5): the message ends once
    assert finishes == ["stop"]
    assert _unstreamed(pieces) == (content, repeated)
