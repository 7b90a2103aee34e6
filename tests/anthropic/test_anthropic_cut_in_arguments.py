"""A body that ends cleanly inside a tool_use block's input (no `content_block_stop`, no
`message_delta`, no `message_stop`).

SPEC §8 (canonical streams, Anthropic): a body that ends cleanly without `message_stop` is
completed (`content_block_stop` for open blocks, `message_delta`, `message_stop`); the stop
signal changes only where it contradicts what was delivered, and an error event is for a
broken transport or a stall (§6). Nothing looks at whether the input is whole: the block
reaches the client with the `partial_json` that arrived. These tests hold the stream to that.
"""

from __future__ import annotations

from typing import Any

from tests.anthropic.anthropic_wire import ev, parse, request, run, start

CUT = '{"command": "l'  # the body ends here, inside a JSON string


def _cut_round(*, delta: bool) -> bytes:
    block = {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {}}
    body = start() + ev({"type": "content_block_start", "index": 0, "content_block": block})
    for piece in (CUT[:6], CUT[6:]):
        body += ev(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
        )
    if delta:  # the upstream's message_delta came, its message_stop did not
        body += ev(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 3},
            }
        )
    return body


def _events(data: bytes) -> list[dict[str, Any]]:
    out = []
    for name, item in parse(data):
        assert isinstance(item, dict) and name == item["type"]
        out.append(item)
    return out


def test_a_body_cut_clean_inside_a_tool_input_is_completed_with_it() -> None:
    for delta in (False, True):
        got = run(request(), [_cut_round(delta=delta)])
        events = _events(got.client)
        types = [e["type"] for e in events]
        assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"], types
        assert "error" not in types
        sent = "".join(
            e["delta"]["partial_json"]
            for e in events
            if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
        )
        assert sent == CUT  # not JSON: an SDK that parses the input at the block's stop fails
        assert events[-2]["delta"]["stop_reason"] == "tool_use"
