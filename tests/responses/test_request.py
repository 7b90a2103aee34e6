"""SPEC §3 and §8 on Responses requests: `input` items' call ids in the route's dialect, turns
as runs of model-made items, and stored conversations' outputs decoded to the issued id."""

from __future__ import annotations

import orjson
import pytest

from proxy.responses.ids import decode_call_id, encode_call_id
from proxy.responses.request import offered_tools, translate_request

USER = {"role": "user", "content": "go"}


def call(call_id: str, name: str = "exec_command", arguments: str = '{"cmd":"ls"}') -> dict:  # type: ignore[type-arg]
    return {
        "type": "function_call",
        "id": "fc_1",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def output(call_id: str, kind: str = "function_call_output") -> dict:  # type: ignore[type-arg]
    return {"type": kind, "id": "fco_1", "call_id": call_id, "output": "ok"}


def test_kimi_dialect_numbers_calls_across_the_history_and_outputs_follow() -> None:
    items = [
        USER,
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
        call("call_aaaa1111_exec_command:0"),
        output("call_aaaa1111_exec_command:0"),
        call("call_bbbb2222_exec_command:0", arguments='{"cmd":"pwd"}'),
        {
            "type": "custom_tool_call",
            "call_id": "call_cccc3333_apply_patch:1",
            "name": "apply_patch",
            "input": "*** Begin",
        },
        output("call_bbbb2222_exec_command:0"),
        output("call_cccc3333_apply_patch:1", "custom_tool_call_output"),
    ]
    body = {"model": "kimi-k3", "input": items}
    out = translate_request(body, "auto")
    ids = [item.get("call_id") for item in out.body["input"]]
    assert ids == [
        None,
        None,
        "functions.exec_command:0",
        "functions.exec_command:0",
        "functions.exec_command:1",
        "functions.apply_patch:2",
        "functions.exec_command:1",
        "functions.apply_patch:2",
    ]
    assert out.facts.turn == 3  # two runs of model-made items
    assert out.facts.dialect == "kimi"
    assert out.body["input"][1] is items[1]  # everything else as it was


def test_turns_are_runs_of_model_made_items() -> None:
    items = [
        USER,
        {"role": "assistant", "content": "hi"},
        call("c1"),
        output("c1"),
        USER,
        call("c2"),
        output("c2"),
    ]
    assert translate_request({"input": items}, "passthrough").facts.turn == 3


def test_request_without_translation_is_forwarded_byte_for_byte() -> None:
    body = {"model": "m", "input": [USER, call("call_abc"), output("call_abc")], "store": False}
    raw = orjson.dumps(body, option=orjson.OPT_INDENT_2)
    out = translate_request(body, "auto")
    assert not out.changed and out.to_bytes(raw) is raw


@pytest.mark.parametrize("stored", [{"previous_response_id": "resp_1"}, {"conversation": "conv_1"}])
def test_stored_conversation_output_carries_the_issued_id(stored: dict) -> None:  # type: ignore[type-arg]
    """Only the output is visible; its call is kept upstream under the id it issued."""
    client_id = encode_call_id("0123abcd", "functions.exec_command:0")
    body = {"model": "kimi-k3", "input": [output(client_id)], **stored}
    out = translate_request(body, "auto")
    assert out.body["input"][0]["call_id"] == "functions.exec_command:0"


def test_stored_conversation_keeps_ids_it_cannot_decode() -> None:
    body = {
        "model": "m",
        "previous_response_id": "resp_1",
        "input": [output("call_abcDEF"), output("call_3_0_deadbeef")],
    }
    out = translate_request(body, "auto")
    assert [i["call_id"] for i in out.body["input"]] == ["call_abcDEF", "call_3_0_deadbeef"]


def test_issued_ids_of_encoded_client_ids_are_known_for_replays() -> None:
    client_id = encode_call_id("0123abcd", "exec_command:0")
    out = translate_request({"input": [USER, call(client_id), output(client_id)]}, "passthrough")
    match = out.facts.replay_of("exec_command:0", ("exec_command", '{"cmd":"ls"}'))
    assert match is not None and match.client_id == client_id


def test_decode_is_the_inverse_of_encode_and_nothing_else_decodes() -> None:
    for raw in ("functions.exec_command:0", "bash_0", "x" * 50, "a_b_c"):
        assert decode_call_id(encode_call_id("89abcdef", raw)) == raw
    for other in (
        "call_abc",
        "call_1_0_deadbeef",
        "functions.x:0",
        "call_DEADBEEF_x",
        "call_0123abcd_",
    ):
        assert decode_call_id(other) is None


def test_offered_tools_include_custom_and_namespace_tools() -> None:
    tools = [
        {"type": "function", "name": "shell", "parameters": {}},
        {"type": "custom", "name": "apply_patch"},
        {"type": "namespace", "name": "mcp", "tools": [{"type": "function", "name": "mcp__read"}]},
        {"type": "web_search"},
    ]
    assert offered_tools({"tools": tools}) == {"shell", "apply_patch", "mcp__read"}


def test_codex_shaped_request() -> None:
    """What Codex sends: `store: false`, the whole history, `fc_`/`fco_` ids echoed, encrypted
    reasoning, a namespace tool with nested functions, a custom (freeform) tool."""
    cid = encode_call_id("a1b2c3d4", "functions.exec_command:0")
    items = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "rules"}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "gAAA=="},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": cid,
            "name": "exec_command",
            "arguments": '{"cmd":"ls"}',
        },
        {"type": "function_call_output", "id": "fco_1", "call_id": cid, "output": "a.txt"},
    ]
    tools = [
        {"type": "function", "name": "exec_command", "parameters": {}},
        {"type": "namespace", "name": "mcp", "tools": [{"type": "function", "name": "mcp__fetch"}]},
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
    ]
    body = {
        "model": "kimi-k3",
        "store": False,
        "stream": True,
        "input": items,
        "tools": tools,
        "include": ["reasoning.encrypted_content"],
    }
    out = translate_request(body, "auto")
    sent = out.body["input"]
    assert sent[3] == {**items[3], "call_id": "functions.exec_command:0"}
    assert sent[4] == {**items[4], "call_id": "functions.exec_command:0"}
    assert sent[:3] == items[:3] and out.body["tools"] is tools and out.body["store"] is False
    assert out.facts.offered_tools == {"exec_command", "mcp__fetch", "apply_patch"}
    assert out.facts.turn == 2
