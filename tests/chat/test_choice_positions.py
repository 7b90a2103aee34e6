"""A choice without an `index` is placed by its position in the chunk (SPEC §4). When the proxy
drops a choice before it (an empty `tool_calls` delta, nothing else left), the position moves:
the client must still be told whose choice it is. Found by tests/reliability/test_fuzz_core.py:
the choice's second finish, `tool_calls`, reached the client as choice 0's first."""

from __future__ import annotations

from tests.chat.helpers import feed_reads, make_core, parse_sse, sse

ENVELOPE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def test_a_choice_placed_by_position_keeps_its_place_when_one_before_it_is_dropped() -> None:
    first = {**ENVELOPE, "choices": [{"finish_reason": None}, {"finish_reason": "stop"}]}
    emptied = {"index": 0, "delta": {"tool_calls": None}, "finish_reason": None}
    second = {**ENVELOPE, "choices": [emptied, {"finish_reason": "tool_calls"}]}
    out = feed_reads(make_core(), [sse(first, second)])
    choices = [e.data["choices"] for e in parse_sse(out) if e.is_chunk]
    assert choices[1] == [{"index": 1, "finish_reason": "tool_calls"}]


def test_a_choice_placed_by_position_passes_unchanged_when_nothing_before_it_is_dropped() -> None:
    chunk = {**ENVELOPE, "choices": [{"delta": {"content": "a"}}, {"delta": {"content": "b"}}]}
    out = feed_reads(make_core(), [sse(chunk)])
    assert parse_sse(out)[0].data["choices"] == chunk["choices"]
