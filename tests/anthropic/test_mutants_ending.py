"""SPEC §8: the end of a streamed message (`ending.py`) at the edges the mutation audit found
unpinned (no usage anywhere, a `message_delta`'s other keys, and the note for a `tool_use`
claimed with no call delivered)."""

from __future__ import annotations

from proxy.core.notes import DeltaRepaired
from tests.anthropic.anthropic_wire import ev, parse, request, run, start, text

MESSAGE = {"id": "msg_up1", "type": "message", "role": "assistant", "content": []}


def test_a_message_without_usage_anywhere_ends_with_no_output_tokens() -> None:
    upstream = (
        ev({"type": "message_start", "message": MESSAGE})
        + text(0, "hi")
        + ev({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
        + ev({"type": "message_stop"})
    )
    client = run(request(), [upstream]).client
    [sent] = [e for n, e in parse(client) if n == "message_delta"]
    assert isinstance(sent, dict) and sent["usage"] == {"output_tokens": 0}


def test_a_message_deltas_other_keys_reach_the_client() -> None:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 3},
        "container": {"id": "c1"},
    }
    upstream = (
        ev({"type": "message_start", "message": MESSAGE})
        + text(0, "hi")
        + ev(delta)
        + ev({"type": "message_stop"})
    )
    client = run(request(), [upstream]).client
    [sent] = [e for n, e in parse(client) if n == "message_delta"]
    assert sent == delta


def test_tool_use_claimed_with_no_call_delivered_is_reported() -> None:
    upstream = (
        start()
        + text(0, "No calls.")
        + ev({"type": "message_delta", "delta": {"stop_reason": "tool_use"}})
        + ev({"type": "message_stop"})
    )
    got = run(request(), [upstream])
    assert got.read().message["stop_reason"] == "end_turn"
    assert got.exchange is not None
    notes, _ = got.exchange.report()
    assert notes == [DeltaRepaired(kind="stop_reason", detail="tool_use -> end_turn")]
