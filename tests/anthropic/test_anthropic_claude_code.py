"""Claude Code's request shapes (system blocks with cache_control, many tools, thinking with
signatures, parallel tool_use, tool_result content blocks and is_error) through the core:
only ids change upstream, and a follow-up keeps the thinking block first."""

from __future__ import annotations

import copy

import orjson

from proxy.anthropic.request import translate_messages
from tests.anthropic.anthropic_wire import end, run, start, thinking, tool

THINK = {"type": "thinking", "thinking": "Two greps at once.", "signature": "EqQBCgIYAhIM"}
CALL_A = {"type": "tool_use", "id": "toolu_1_0_aaaa1111", "name": "Grep", "input": {"pattern": "a"}}
CALL_B = {"type": "tool_use", "id": "toolu_1_1_aaaa2222", "name": "Grep", "input": {"pattern": "b"}}
TOOLS = [
    {"name": name, "description": f"{name} tool", "input_schema": {"type": "object"}}
    for name in ("Bash", "Read", "Edit", "Write", "Grep", "Glob", "TodoWrite", "WebFetch")
]
TOOLS[-1]["cache_control"] = {"type": "ephemeral"}
BODY = {
    "model": "kimi-k2-instruct",
    "max_tokens": 32000,
    "stream": True,
    "thinking": {"type": "enabled", "budget_tokens": 4000},
    "metadata": {"user_id": "user_abc_account__session_1"},
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Environment: linux"},
    ],
    "tools": TOOLS,
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "find a and b"}]},
        {
            "role": "assistant",
            "content": [THINK, {"type": "text", "text": "Searching."}, CALL_A, CALL_B],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": CALL_A["id"],
                    "content": [{"type": "text", "text": "a.py"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": CALL_B["id"],
                    "content": "no match",
                    "is_error": True,
                },
                {
                    "type": "text",
                    "text": "<system-reminder>todo</system-reminder>",
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        },
    ],
}


def test_only_the_ids_change_upstream() -> None:
    body = copy.deepcopy(BODY)
    out = translate_messages(body, "auto").body
    assert body == BODY  # the client's body is not mutated
    expected = copy.deepcopy(BODY)
    assistant, results = expected["messages"][1]["content"], expected["messages"][2]["content"]
    assistant[2]["id"] = results[0]["tool_use_id"] = "functions.Grep:0"
    assistant[3]["id"] = results[1]["tool_use_id"] = "functions.Grep:1"
    assert out == expected
    assert list(out) == list(BODY)  # key order kept


def test_a_thinking_round_whose_call_is_a_replay_is_followed_up_with_its_thinking_first() -> None:
    replay = (
        start()
        + thinking(0, "Again?", "SIG2")
        + tool(1, "functions.Grep:0", "Grep", {"pattern": "a"})
        + end()
    )
    final = start("m2") + tool(0, "functions.Grep:3", "Grep", {"pattern": "c"}) + end()
    got = run(BODY, [replay, final])
    [followup] = got.followups
    asked = followup["messages"][-2]
    assert asked["content"][0] == {"type": "thinking", "thinking": "Again?", "signature": "SIG2"}
    assert (
        asked["content"][1]["type"] == "tool_use"
        and asked["content"][1]["id"] == "functions.Grep:2"
    )
    assert followup["system"] == BODY["system"] and followup["tools"] == BODY["tools"]
    received = got.read()
    assert [b["type"] for b in received.message["content"]] == ["thinking", "tool_use"]
    assert received.message["content"][0]["signature"] == "SIG2"
    assert received.tools[0]["input"] == {"pattern": "c"}
    assert orjson.dumps(received.message)
