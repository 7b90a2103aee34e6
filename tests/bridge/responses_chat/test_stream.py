"""The streamed direction (SPEC §8, §9): the Chat exchange's canonical stream as Responses
events, one stream across follow-up rounds, ids that survive the round trip without state,
and what an official SDK accumulates from it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.bridge.responses_chat.reasoning import seal
from proxy.core.errors import ReplayLoopDetected, UpstreamStreamError
from proxy.core.events import LoopDetected
from tests.bridge.responses_chat.wire import (
    APPLY_PATCH,
    PATCH,
    SHELL,
    body,
    call,
    output,
    run,
    upstream_messages,
    user,
)
from tests.chat.helpers import chunk, finish, frag, header, role, sse, text, usage_chunk
from tests.responses.helpers import check_grammar, parse

THOUGHT = "Let me look é"
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 100},
    "completion_tokens_details": {"reasoning_tokens": 12},
}
PATCH_ARGS = json.dumps({"input": PATCH})


def full_stream() -> bytes:
    """Reasoning, text, a function call and a custom call (arguments in fragments), usage."""
    return sse(
        role(),
        chunk({"reasoning_content": "Let me "}),
        chunk({"reasoning_content": "look é"}),
        text("I'll run it."),
        chunk({"tool_calls": [header(0, "call_Ab3dEf7Gh9Jk", "shell", '{"cmd":')]}),
        chunk({"tool_calls": [frag(0, '"ls"}')]}),
        chunk({"tool_calls": [header(1, "call_Zx9Yw8Vu7Ts6", "apply_patch", PATCH_ARGS[:9])]}),
        chunk({"tool_calls": [frag(1, PATCH_ARGS[9:])]}),
        finish("tool_calls"),
        {**usage_chunk(), "usage": USAGE},
    )


def items_of(response: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == kind]


def test_a_full_stream_in_responses_grammar() -> None:
    result = run(body(model="some-model"), [[full_stream()]])
    events = parse(result.client)
    response = check_grammar(events)  # sequence, dense indexes, output == done items, SDK
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert [i["type"] for i in response["output"]] == [
        "reasoning",
        "message",
        "function_call",
        "custom_tool_call",
    ]
    reasoning, message, function, custom = response["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    assert reasoning["encrypted_content"] == seal(THOUGHT)
    assert message["content"][0]["text"] == "I'll run it."
    assert (function["call_id"], function["name"], function["arguments"]) == (
        "call_Ab3dEf7Gh9Jk",
        "shell",
        '{"cmd":"ls"}',
    )
    assert (custom["call_id"], custom["name"], custom["input"]) == (
        "call_Zx9Yw8Vu7Ts6",
        "apply_patch",
        PATCH,
    )
    assert function["id"].startswith("fc_") and custom["id"].startswith("ctc_")
    assert message["id"].startswith("msg_") and reasoning["id"].startswith("rs_")
    assert response["id"].startswith("resp_") and response["status"] == "completed"
    assert response["usage"] == {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 100},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": 150,
    }
    by_type = {e["type"]: e for e in events}
    assert by_type["response.reasoning_text.done"]["text"] == THOUGHT
    assert by_type["response.custom_tool_call_input.done"]["input"] == PATCH
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == PATCH
    assert result.last is not None and result.last.last


def test_every_split_of_the_upstream_gives_the_same_client_bytes() -> None:
    raw = full_stream()
    whole = run(body(), [[raw]]).client
    assert run(body(), [[raw[i : i + 1] for i in range(len(raw))]]).client == whole
    for cut in range(1, len(raw)):
        assert run(body(), [[raw[:cut], raw[cut:]]]).client == whole, cut


def test_custom_call_and_reasoning_round_trip_to_the_upstream() -> None:
    """The client's items go back as the request's history: the patch call upstream as a
    function call with the same input string, the reasoning as `reasoning_content`."""
    first = check_grammar(parse(run(body(model="glm"), [[full_stream()]]).client))
    echoed = [
        {k: v for k, v in i.items() if k != "content" or i["type"] != "reasoning"}
        for i in first["output"]
    ]
    history = [
        user("go"),
        *echoed,
        output("call_Ab3dEf7Gh9Jk", "out.txt"),
        output("call_Zx9Yw8Vu7Ts6", "Success.", "custom_tool_call_output"),
    ]
    second = run(body(*history, model="glm"), [])  # passthrough dialect: ids as they are
    assert second.exchange.dropped == ()
    messages = upstream_messages(second.exchange)
    assistant = messages[1]
    assert assistant["reasoning_content"] == THOUGHT
    assert assistant["content"] == "I'll run it."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_Ab3dEf7Gh9Jk", "call_Zx9Yw8Vu7Ts6"]
    patch_call = assistant["tool_calls"][1]["function"]
    assert patch_call["name"] == "apply_patch"
    assert orjson.loads(patch_call["arguments"]) == {"input": PATCH}
    assert [(m["tool_call_id"], m["content"]) for m in messages[2:]] == [
        ("call_Ab3dEf7Gh9Jk", "out.txt"),
        ("call_Zx9Yw8Vu7Ts6", "Success."),
    ]


def kimi_call(args: str) -> bytes:
    return sse(
        role(), chunk({"tool_calls": [header(0, "functions.shell:0", "shell", args)]}), finish()
    )


def test_kimi_ids_recurring_every_turn_reach_the_client_unique_and_go_back_as_kimi() -> None:
    one = check_grammar(parse(run(body(user("go")), [[kimi_call('{"cmd":"ls"}')]]).client))
    first_id = one["output"][0]["call_id"]
    assert first_id.startswith("call_1_0_")
    turn_two = body(user("go"), call(first_id, '{"cmd":"ls"}'), output(first_id))
    two = run(turn_two, [[kimi_call('{"cmd":"pwd"}')]])
    assert upstream_messages(two.exchange)[1]["tool_calls"][0]["id"] == "functions.shell:0"
    assert upstream_messages(two.exchange)[2]["tool_call_id"] == "functions.shell:0"
    second_id = check_grammar(parse(two.client))["output"][0]["call_id"]
    assert second_id.startswith("call_2_0_") and second_id != first_id
    turn_three = body(
        user("go"),
        call(first_id, '{"cmd":"ls"}'),
        output(first_id),
        call(second_id, '{"cmd":"pwd"}'),
        output(second_id),
    )
    messages = upstream_messages(run(turn_three, []).exchange)
    ids = [c["id"] for m in messages for c in m.get("tool_calls", [])]
    assert ids == ["functions.shell:0", "functions.shell:1"]
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ids


def answered_ls() -> tuple[str, dict[str, Any]]:
    first_id = check_grammar(parse(run(body(), [[kimi_call('{"cmd":"ls"}')]]).client))["output"][0][
        "call_id"
    ]
    return first_id, body(user("go"), call(first_id, '{"cmd":"ls"}'), output(first_id))


def test_a_replay_is_answered_by_a_follow_up_and_reads_as_one_response() -> None:
    _, request = answered_ls()
    replay = sse(
        role(),
        chunk({"tool_calls": [header(0, "functions.shell:0", "shell", '{"cmd":"ls"}')]}),
        finish(),
        usage_chunk(10, 2),
    )
    answer = sse(role(), text("Nothing new."), finish("stop"), usage_chunk(20, 3))
    result = run(request, [[replay], [answer]])
    assert len(result.followups) == 1
    synthetic = result.followups[0]["messages"][-1]
    assert synthetic["role"] == "tool"
    assert synthetic["content"].startswith(
        'Duplicate tool call id "functions.shell:0" was already handled'
    )
    events = parse(result.client)
    response = check_grammar(events)
    assert [e["type"] for e in events].count("response.created") == 1
    assert [i["type"] for i in response["output"]] == ["message"]
    assert response["output"][0]["content"][0]["text"] == "Nothing new."
    assert (response["usage"]["input_tokens"], response["usage"]["output_tokens"]) == (30, 5)


def test_a_loop_before_anything_visible_is_still_a_plain_error() -> None:
    _, request = answered_ls()
    replay = kimi_call('{"cmd":"ls"}')
    result = run(request, [[replay], [replay], [replay], [replay]])
    assert isinstance(result.end, LoopDetected) and result.end.before_first_byte
    assert result.client == b""


def test_a_loop_after_text_ends_the_stream_with_a_final_failure() -> None:
    _, request = answered_ls()
    replay = sse(
        role(),
        text("Checking."),
        chunk({"tool_calls": [header(0, "functions.shell:0", "shell", '{"cmd":"ls"}')]}),
        finish(),
    )
    result = run(request, [[replay], [replay], [replay], [replay]])
    assert isinstance(result.end, LoopDetected) and not result.end.before_first_byte
    tail = result.exchange.stream_error(result.end.error)
    events = parse(result.client + tail)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["sequence_number"] == events[-2]["sequence_number"] + 1
    error = events[-1]["response"]["error"]
    assert error["code"] == "invalid_prompt" and "tool_call_replay_loop" in error["message"]
    assert not any(e["type"] == "response.completed" for e in events)


def test_stream_error_before_anything_writes_the_head_first() -> None:
    result = run(body(), [])
    events = parse(result.exchange.stream_error(UpstreamStreamError("cut")))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    assert [e["sequence_number"] for e in events] == [0, 1, 2]
    assert events[2]["response"]["error"] == {"code": "upstream_stream_error", "message": "cut"}
    loop = ReplayLoopDetected("shell", "functions.shell:0", "answered")
    assert result.exchange.stream_error(loop) == b""  # the stream already ended


@pytest.mark.parametrize(
    ("reason", "why"), [("length", "max_output_tokens"), ("content_filter", "content_filter")]
)
def test_a_cut_off_answer_is_incomplete(reason: str, why: str) -> None:
    result = run(body(), [[sse(role(), text("Half"), finish(reason))]])
    events = parse(result.client)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.incomplete"
    response = events[-1]["response"]
    assert response["status"] == "incomplete"
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert response["output"] == done
    assert response["incomplete_details"] == {"reason": why}
    assert response["output"][0]["status"] == "incomplete"


def test_comments_pass_at_once_and_an_upstream_error_event_fails_the_response() -> None:
    result = run(body(), [[sse(b": keep-alive", role(), text("Hi"), done=False)]])
    assert result.client.startswith(b": keep-alive\n\n")
    broken = run(
        body(),
        [[sse(role(), text("Hi"), {"error": {"message": "overloaded", "code": "busy"}})]],
    )
    events = parse(broken.client)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"] == {"code": "busy", "message": "overloaded"}


def test_namespaced_calls_come_back_with_their_namespace() -> None:
    namespace = {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "agents",
        "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}],
    }
    upstream = sse(
        role(),
        chunk(
            {"tool_calls": [header(0, "call_Q1w2E3r4T5y6", "multi_agent_v1__spawn_agent", "{}")]}
        ),
        finish(),
    )
    request = body(tools=[namespace, SHELL])
    assert (
        orjson.loads(run(request, []).exchange.upstream_request)["tools"][0]["function"]["name"]
        == "multi_agent_v1__spawn_agent"
    )
    item = check_grammar(parse(run(request, [[upstream]]).client))["output"][0]
    assert (item["type"], item["name"], item["namespace"]) == (
        "function_call",
        "spawn_agent",
        "multi_agent_v1",
    )


# -- the openai SDK reads the stream ---------------------------------------------------------


def sdk_client(payload: bytes, content_type: str) -> openai.OpenAI:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=payload, headers={"content-type": content_type})

    transport = httpx.MockTransport(answer)
    return openai.OpenAI(
        base_url="http://bridge.test/v1", api_key="k", http_client=httpx.Client(transport=transport)
    )


def test_the_openai_sdk_accumulates_the_stream() -> None:
    result = run(body(), [[full_stream()]])
    client = sdk_client(result.client, "text/event-stream")
    with client.responses.stream(
        model="m",
        input="go",
        tools=[SHELL, APPLY_PATCH],  # type: ignore[list-item]
    ) as stream:
        done = [e.item for e in stream if e.type == "response.output_item.done"]
        final = stream.get_final_response()
    assert (
        [i.type for i in final.output]
        == [i.type for i in done]
        == [
            "reasoning",
            "message",
            "function_call",
            "custom_tool_call",
        ]
    )
    assert final.output_text == "I'll run it."
    reasoning, _, function, custom = final.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content == seal(THOUGHT)
    assert function.type == "function_call" and function.arguments == '{"cmd":"ls"}'
    assert custom.type == "custom_tool_call" and custom.input == PATCH
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens == 100
    assert final.usage.output_tokens_details.reasoning_tokens == 12
