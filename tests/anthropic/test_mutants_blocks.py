"""SPEC §5, §8: the blocks a stream tracks (`blocks.py`) at the edges the mutation audit found
unpinned (a tool_use block's odd name and input, the note for a rewritten id, and the blocks a
follow-up's assistant message repeats)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.ids import mint_client_id
from proxy.core.notes import IdRewritten
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import (
    assistant,
    end,
    ev,
    request,
    results,
    run,
    run_message,
    start,
    text,
    tool,
    tool_use,
)

JSON = dict[str, Any]
LS = {"command": "ls"}
MINTED = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
HISTORY = (assistant(tool_use(MINTED, "Bash", LS)), results(MINTED))
NO_SCAN = RouteRules(text_tool_calls=False)


def block(index: int, content_block: JSON, *deltas: JSON) -> bytes:
    return (
        ev({"type": "content_block_start", "index": index, "content_block": content_block})
        + b"".join(ev({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas)
        + ev({"type": "content_block_stop", "index": index})
    )


def followup_assistant(*blocks: bytes) -> list[JSON]:
    """The assistant message a follow-up repeats after a replay round made of `blocks`."""
    replay = start() + b"".join(blocks) + tool(9, "functions.Bash:0", "Bash", LS) + end()
    final = start() + text(0, "ok") + end("end_turn")
    got = run(request(*HISTORY), [replay, final], NO_SCAN)
    [followup] = got.followups
    message = followup["messages"][-2]
    assert message["role"] == "assistant"
    content: list[JSON] = message["content"]
    assert content[-1]["type"] == "tool_use"
    return content[:-1]


def test_a_tool_name_that_is_not_a_string_becomes_empty() -> None:
    call = {"type": "tool_use", "id": "toolu_01A", "name": 7, "input": LS}
    body = {"id": "msg_a", "type": "message", "role": "assistant", "content": [call]}
    event, _ = run_message(request(stream=False), [{**body, "stop_reason": "tool_use"}])
    assert orjson.loads(event.data)["content"][0]["name"] == ""


def test_an_empty_string_input_is_no_input() -> None:
    upstream = (
        start()
        + block(
            0,
            {"type": "tool_use", "id": "toolu_01A", "name": "Bash", "input": ""},
            {"type": "input_json_delta", "partial_json": orjson.dumps(LS).decode()},
        )
        + end()
    )
    assert run(request(), [upstream]).read().tools[0]["input"] == LS


def test_a_call_with_no_input_duplicates_one_whose_input_is_empty() -> None:
    # The same raw id twice: no input at all means `{}`, so the second is a duplicate.
    upstream = (
        start()
        + tool(0, "grep:3", "grep", {}, deltas=False)
        + tool(1, "grep:3", "grep", {})
        + end()
    )
    tools = run(request(), [upstream]).read().tools
    assert [t["input"] for t in tools] == [{}]


def test_a_rewritten_id_is_reported_with_what_it_was_and_became() -> None:
    got = run(request(), [start() + tool(0, "functions.Bash:0", "Bash", LS) + end()])
    client_id = got.read().tools[0]["id"]
    assert got.exchange is not None
    notes, _ = got.exchange.report()
    assert notes == [
        IdRewritten(
            choice=0,
            index=0,
            name="Bash",
            raw_id="functions.Bash:0",
            client_id=client_id,
            reason="invalid",
        )
    ]


def test_a_native_id_kept_reports_nothing() -> None:
    got = run(request(), [start() + tool(0, "toolu_01A", "Bash", LS) + end()])
    assert got.exchange is not None
    assert got.exchange.report()[0] == []


def test_a_follow_up_repeats_text_thinking_and_redacted_thinking_whole() -> None:
    thought = {"type": "thinking", "thinking": ""}  # no signature key until its delta
    content = followup_assistant(
        text(0, "Again", "."),
        block(
            1,
            thought,
            {"type": "thinking_delta", "thinking": "a"},
            {"type": "thinking_delta", "thinking": "b"},
            {"type": "signature_delta", "signature": "sig"},
        ),
        block(2, {"type": "redacted_thinking", "data": "xyz"}),
    )
    assert content == [
        {"type": "text", "text": "Again."},
        {"type": "thinking", "thinking": "ab", "signature": "sig"},
        {"type": "redacted_thinking", "data": "xyz"},
    ]


def test_a_follow_up_leaves_out_empty_text_and_blocks_it_does_not_record() -> None:
    content = followup_assistant(
        text(0),
        block(1, {"type": "odd_block"}, {"type": "text_delta", "text": "x"}),
        text(2, "kept"),
    )
    assert content == [{"type": "text", "text": "kept"}]
