"""SPEC §8, Anthropic Messages: a message that arrives whole inside `message_start` (its blocks
and `stop_reason` there, then only `message_stop`), as some translating servers send it.

The SDKs take `message_start`'s message as the start of the final one: its blocks are the first
blocks, its `stop_reason` stands unless a `message_delta` changes it. So the proxy keeps the
blocks in place (only a tool_use id changes, by SPEC §2), counts them in the dense indexes, and
the `message_delta` it writes carries that stop signal, never null.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from proxy.core.ids import mint_client_id
from tests.anthropic.anthropic_wire import (
    assistant,
    ev,
    request,
    results,
    run,
    text,
    tool,
    tool_use,
)

LS = {"command": "ls"}
MINTED = re.compile(r"^toolu_(\d+)_(\d+)_([0-9a-f]{8})$")


def _whole(*blocks: dict[str, Any], stop_reason: str | None = "tool_use") -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_whole",
            "type": "message",
            "role": "assistant",
            "model": "some-model",
            "content": list(blocks),
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 7},
        },
    }


STOP = ev({"type": "message_stop"})


def test_the_stop_reason_and_usage_of_a_whole_message_reach_the_client() -> None:
    start = _whole(
        {"type": "text", "text": "Listing."},
        {"type": "tool_use", "id": "toolu_01A", "name": "Bash", "input": LS},
    )
    got = run(request(), [ev(start) + STOP])
    received = got.read()
    assert received.message["stop_reason"] == "tool_use"  # was null
    assert received.message["usage"]["output_tokens"] == 7  # was 0
    assert [b["type"] for b in received.message["content"]] == ["text", "tool_use"]
    assert received.tools[0] == {"type": "tool_use", "id": "toolu_01A", "name": "Bash", "input": LS}
    # Nothing to change in it: message_start goes on as the bytes that arrived.
    assert got.client.startswith(ev(start))


def test_a_whole_message_that_ended_its_turn_keeps_end_turn_and_its_stop_sequence() -> None:
    start = _whole({"type": "text", "text": "Done."}, stop_reason="stop_sequence")
    start["message"]["stop_sequence"] = "###"
    received = run(request(), [ev(start) + STOP]).read()
    assert received.message["stop_reason"] == "stop_sequence"
    assert received.message["stop_sequence"] == "###"


def test_a_whole_message_claiming_tool_use_without_a_tool_use_block_ends_its_turn() -> None:
    """The stop signal where it contradicts what was delivered is a field a rule names."""
    received = run(request(), [ev(_whole({"type": "text", "text": "Hm."})) + STOP]).read()
    assert received.message["stop_reason"] == "end_turn"


def test_a_kimi_id_inside_message_start_is_minted_and_nothing_else_changes() -> None:
    start = _whole({"type": "tool_use", "id": "functions.Bash:0", "name": "Bash", "input": LS})
    got = run(request(), [ev(start) + STOP])
    received = got.read()
    [call] = received.tools
    assert MINTED.match(call["id"]) and call["input"] == LS
    sent = orjson.loads(got.client.split(b"\n")[1].removeprefix(b"data: "))
    expected = start["message"]
    assert sent["message"] == {
        **expected,
        "content": [{**expected["content"][0], "id": call["id"]}],
    }


def test_blocks_streamed_after_a_whole_message_start_continue_its_indexes() -> None:
    """The SDKs index the message's content: a block after message_start's one is index 1."""
    start = _whole({"type": "text", "text": "First."}, stop_reason=None)
    upstream = ev(start) + tool(0, "functions.Bash:0", "Bash", LS)
    upstream += ev({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}})
    received = run(request(), [upstream + STOP]).read()  # read() checks the indexes are dense
    assert [b["type"] for b in received.message["content"]] == ["text", "tool_use"]
    assert received.message["stop_reason"] == "tool_use"


def test_a_replay_inside_message_start_is_answered_by_a_follow_up_round() -> None:
    minted = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
    history = (assistant(tool_use(minted, "Bash", LS)), results(minted))
    replay = _whole({"type": "tool_use", "id": "functions.Bash:0", "name": "Bash", "input": LS})
    final = _whole({"type": "text", "text": "Already listed."}, stop_reason="end_turn")
    got = run(request(*history), [ev(replay) + STOP, ev(final) + STOP])
    [followup] = got.followups
    answer = followup["messages"][-1]["content"][0]
    assert answer["type"] == "tool_result" and answer["is_error"] is True
    received = got.read()
    # The replay never reaches the client; the follow-up's whole message is its continuation.
    assert received.tools == []
    assert received.message["content"] == [{"type": "text", "text": "Already listed."}]
    assert received.message["stop_reason"] == "end_turn"


def test_a_follow_up_round_after_streamed_blocks_sends_its_whole_blocks_as_events() -> None:
    minted = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
    history = (assistant(tool_use(minted, "Bash", LS)), results(minted))
    replay = text(0, "Again.") + tool(1, "functions.Bash:0", "Bash", LS)
    first = ev(_whole(stop_reason=None)) + replay + STOP
    final = _whole({"type": "text", "text": "Done."}, stop_reason="end_turn")
    received = run(request(*history), [first, ev(final) + STOP]).read()
    assert received.message["content"] == [
        {"type": "text", "text": "Again."},
        {"type": "text", "text": "Done."},
    ]
    assert received.types().count("message_start") == 1
