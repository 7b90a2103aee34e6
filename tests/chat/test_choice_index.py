"""A choice without an `index` is placed by its position: when the proxy adds tool calls to it
(a held header, "{}" for arguments that never came), the client must be told which choice
they belong to. Found by tests/chat/test_properties.py's random shapes."""

from __future__ import annotations

from tests.chat.helpers import USER, Setup, feed_reads, parse_sse, request, sse


def test_calls_released_into_an_index_less_choice_carry_its_index() -> None:
    chunks = [
        {
            "id": "chatcmpl-1",
            "choices": [
                {
                    "index": 1,
                    "delta": {
                        "role": "assistant",
                        "tool_calls": {"function": {"name": "f"}, "id": "call_0"},
                    },
                }
            ],
        },
        # the finish comes in the second position, with no index: it is choice 1's
        {"id": "chatcmpl-1", "choices": [{}, {"finish_reason": "stop"}]},
    ]
    setup = Setup(body=request([USER]), hex_values=("aaaa", "bbbb", "cccc"))
    events = parse_sse(feed_reads(setup.core(), [sse(*chunks, done=False)]))
    released = [
        choice
        for event in events
        if event.is_chunk
        for choice in event.data["choices"]
        if choice.get("finish_reason") == "tool_calls"
    ]
    assert len(released) == 1
    assert released[0]["index"] == 1
    assert released[0]["delta"]["tool_calls"] == [{"index": 0, "function": {"arguments": "{}"}}]
