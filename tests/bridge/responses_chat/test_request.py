"""The request mapping (SPEC §9): every field of the recorded Codex requests meets a fate
(mapped, refused, or named in `dropped`), and the mapping rules field by field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.bridge.responses_chat import new_responses_over_chat, responses_to_chat
from proxy.bridge.responses_chat.reasoning import seal
from proxy.core.errors import ClientRequestError
from proxy.core.rounds import RouteRules
from tests.bridge.responses_chat.wire import APPLY_PATCH, SHELL, body, call, output, user

FIXTURES = Path(__file__).parents[2] / "fixtures" / "codex"


def codex(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())["body"]  # type: ignore[no-any-return]


def tools_by_name(chat: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"] for t in chat["tools"]}


# -- the recorded Codex requests -------------------------------------------------------------


def test_kimi_codex_request_every_field_has_its_fate() -> None:
    request = codex("kimi-k2-request-4")
    chat, dropped = responses_to_chat(request)
    # Mapped: the model, the stream (with usage), the tools and their choice.
    assert chat["model"] == "kimi-k2"
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is True
    # Named: the hosted tool, Kimi-foreign reasoning items, the summary asked for, and the
    # fields Chat has no word for. `store: false` and `include` of encrypted reasoning are
    # served as asked, so they are not named.
    assert set(dropped) == {
        "web_search",
        "reasoning_items",
        "reasoning.summary",
        "prompt_cache_key",
        "client_metadata",
    }
    assert len(dropped) == len(set(dropped))
    assert set(chat) == {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "stream",
        "stream_options",
    }


def test_kimi_codex_history_maps_item_by_item() -> None:
    request = codex("kimi-k2-request-4")
    chat, _ = responses_to_chat(request)
    roles = [m["role"] for m in chat["messages"]]
    # developer, developer, user, user; three turns of calls and their outputs (the third
    # turn's two parallel calls in one assistant message, their outputs in call order).
    assert roles == ["system", "system", "user", "user"] + ["assistant", "tool"] * 2 + [
        "assistant",
        "tool",
        "tool",
    ]
    second_developer = request["input"][1]["content"]
    for part in second_developer:  # three text parts, one system message, none lost
        assert part["text"] in chat["messages"][1]["content"]
    items = request["input"]
    calls = [i for i in items if i["type"] == "function_call"]
    chat_calls = [c for m in chat["messages"] for c in m.get("tool_calls", [])]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in chat_calls] == [
        (c["call_id"], c["name"], c["arguments"]) for c in calls
    ]
    last = chat["messages"][-3]
    assert [c["function"]["arguments"] for c in last["tool_calls"]] == [
        calls[2]["arguments"],
        calls[3]["arguments"],
    ]
    outputs = [i for i in items if i["type"] == "function_call_output"]
    tools = [m for m in chat["messages"] if m["role"] == "tool"]
    assert [(t["tool_call_id"], t["content"]) for t in tools] == [
        (o["call_id"], o["output"]) for o in outputs
    ]
    assert all(m["content"] is None for m in chat["messages"] if m["role"] == "assistant")


def test_kimi_codex_tools_flatten_the_namespace() -> None:
    request = codex("kimi-k2-request-4")
    chat, _ = responses_to_chat(request)
    functions = tools_by_name(chat)
    namespace = next(t for t in request["tools"] if t["type"] == "namespace")
    for nested in namespace["tools"]:
        mapped = functions[f"multi_agent_v1__{nested['name']}"]
        assert mapped["parameters"] == nested["parameters"]
        assert mapped["description"] == nested["description"]
    exec_command = next(t for t in request["tools"] if t.get("name") == "exec_command")
    assert functions["exec_command"] == {
        "name": "exec_command",
        "description": exec_command["description"],
        "parameters": exec_command["parameters"],
        "strict": False,
    }
    assert "web_search" not in json.dumps(chat["tools"])


def test_gpt_codex_request_custom_tool_reasoning_effort_and_drops() -> None:
    request = codex("gpt-5.5-request-4")
    chat, dropped = responses_to_chat(request)
    assert chat["reasoning_effort"] == "medium"
    assert set(dropped) == {
        "tool_search",
        "web_search",
        "reasoning_items",
        "text.verbosity",
        "prompt_cache_key",
        "client_metadata",
    }
    patch_tool = tools_by_name(chat)["apply_patch"]
    assert patch_tool["parameters"]["properties"] == {
        "input": {"type": "string", "description": "The tool's whole input, as raw text."}
    }
    assert patch_tool["parameters"]["required"] == ["input"]
    custom = next(t for t in request["tools"] if t["type"] == "custom")
    assert patch_tool["description"].startswith(custom["description"])
    assert custom["format"]["definition"] in patch_tool["description"]
    # The custom call goes upstream as a function call whose one argument is the input.
    item = next(i for i in request["input"] if i["type"] == "custom_tool_call")
    last = chat["messages"][-3]
    assert last["role"] == "assistant"
    patch_call = last["tool_calls"][1]
    assert patch_call["id"] == item["call_id"]
    assert orjson.loads(patch_call["function"]["arguments"]) == {"input": item["input"]}
    answer = next(i for i in request["input"] if i["type"] == "custom_tool_call_output")
    assert chat["messages"][-1] == {
        "role": "tool",
        "tool_call_id": answer["call_id"],
        "content": answer["output"],
    }


@pytest.mark.parametrize("name", ["kimi-k2-request-1", "gpt-5.5-request-1"])
def test_first_codex_requests_map_developer_and_user_messages(name: str) -> None:
    request = codex(name)
    chat, dropped = responses_to_chat(request)
    assert [m["role"] for m in chat["messages"]] == ["system", "system", "user", "user"]
    assert chat["messages"][3]["content"] == request["input"][3]["content"][0]["text"]
    assert "web_search" in dropped and "reasoning_items" not in dropped


def test_kimi_codex_history_goes_upstream_in_kimi_ids() -> None:
    """The Chat exchange translates the call ids into the route's dialect (SPEC §3): the
    k-th call of the history is `functions.{name}:{k}`, not the recurring `:0`."""
    request = codex("kimi-k2-request-4")
    exchange = new_responses_over_chat(request, b"", RouteRules(), lambda n: b"\x01" * n)
    messages = orjson.loads(exchange.upstream_request)["messages"]
    ids = [c["id"] for m in messages for c in m.get("tool_calls", [])]
    assert ids == [f"functions.exec_command:{k}" for k in range(4)]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert answered == ids
    assert exchange.dropped == responses_to_chat(request)[1]
    assert exchange.facts.dialect == "kimi"


# -- stored state is refused -----------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        {"previous_response_id": "resp_1"},
        {"conversation": {"id": "conv_1"}},
        {"input": [{"type": "item_reference", "id": "msg_1"}]},
        {"background": True},
    ],
)
def test_stateful_requests_are_refused_with_advice(extra: dict[str, Any]) -> None:
    with pytest.raises(ClientRequestError) as caught:
        new_responses_over_chat(body(**extra), b"", RouteRules(), lambda n: b"\x01" * n)
    error = caught.value
    assert error.status == 400 and error.code == "unsupported_stateful_request"
    assert "store: false" in error.message and "whole conversation" in error.message
    assert orjson.loads(error.json_bytes())["error"]["type"] == "invalid_request_error"


def test_store_true_alone_is_served() -> None:
    chat, dropped = responses_to_chat(body(store=True))
    assert chat["messages"] == [{"role": "user", "content": "run it"}]
    assert "store" not in dropped and "store" not in chat


# -- field by field --------------------------------------------------------------------------


def test_scalar_fields_and_text_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    chat, dropped = responses_to_chat(
        body(
            instructions="Be brief.",
            max_output_tokens=99,
            temperature=0.2,
            top_p=0.9,
            user="u1",
            metadata={"k": "v"},
            text={"format": {"type": "json_schema", "name": "out", "schema": schema}},
            include=["reasoning.encrypted_content", "message.output_text.logprobs"],
        )
    )
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}
    assert (chat["max_tokens"], chat["temperature"], chat["top_p"], chat["user"]) == (
        99,
        0.2,
        0.9,
        "u1",
    )
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": schema},
    }
    assert set(dropped) == {"metadata", "include:message.output_text.logprobs"}


def test_instructions_come_before_developer_items_which_stay_in_place() -> None:
    developer = {"type": "message", "role": "developer", "content": "dev note"}
    chat, _ = responses_to_chat(
        body(user("a"), developer, user("b"), instructions="sys", stream=False)
    )
    assert chat["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "a"},
        {"role": "system", "content": "dev note"},
        {"role": "user", "content": "b"},
    ]
    assert "stream" not in chat and "stream_options" not in chat


def test_a_string_input_is_one_user_message() -> None:
    chat, _ = responses_to_chat({"model": "m", "input": "hello"})
    assert chat == {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def test_images_and_files_become_chat_parts_and_what_cannot_is_named() -> None:
    data_url = "data:image/png;base64,iVBORw0KGgo="
    item = {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "https://x/y.png", "detail": "high"},
            {"type": "input_image", "image_url": data_url},
            {
                "type": "input_file",
                "filename": "a.pdf",
                "file_data": "data:application/pdf;base64,JVBE",
            },
            {"type": "input_file", "file_id": "file_1"},
            {"type": "input_image", "file_id": "file_2"},
        ],
    }
    chat, dropped = responses_to_chat(body(item))
    assert chat["messages"][0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": data_url}},
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
        },
    ]
    assert {"input_file.file_id", "input_image.file_id"} <= set(dropped)


def test_outputs_go_in_call_order_before_what_came_between_them() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    chat, _ = responses_to_chat(
        body(
            user("go"),
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Sure."}],
            },
            call("call_a"),
            call("call_b", '{"cmd":"pwd"}'),
            output("call_b", "B"),
            user("meanwhile"),
            {
                "type": "function_call_output",
                "call_id": "call_a",
                "output": [{"type": "input_text", "text": "A"}, image],
            },
        )
    )
    messages = chat["messages"]
    assert messages[1]["content"] == "Sure."
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_a", "call_b"]
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "call_a", "content": "A"},
        {"role": "tool", "tool_call_id": "call_b", "content": "B"},
        {"role": "user", "content": "meanwhile"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": image["image_url"]}}],
        },
    ]


def test_our_reasoning_goes_back_as_reasoning_content_and_a_foreign_one_is_named() -> None:
    ours = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": seal("think é")}
    foreign = {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAAB"}
    chat, dropped = responses_to_chat(
        body(
            user("go"),
            ours,
            call("call_a"),
            output("call_a"),
            foreign,
            call("call_b"),
            output("call_b"),
        )
    )
    assistants = [m for m in chat["messages"] if m["role"] == "assistant"]
    assert assistants[0]["reasoning_content"] == "think é"
    assert "reasoning_content" not in assistants[1]
    assert dropped == ("reasoning_items",)


def test_namespaced_calls_and_tool_choices_use_the_flat_name() -> None:
    namespace = {
        "type": "namespace",
        "name": "mcp__srv",
        "description": "d",
        "tools": [{"type": "function", "name": "fetch", "parameters": {"type": "object"}}],
    }
    namespaced = {**call("call_n", "{}", "fetch"), "namespace": "mcp__srv"}
    request = body(user("go"), namespaced, output("call_n"), tools=[namespace, SHELL, APPLY_PATCH])
    for choice, expected in [
        ({"type": "function", "name": "fetch", "namespace": "mcp__srv"}, "mcp__srv__fetch"),
        ({"type": "custom", "name": "apply_patch"}, "apply_patch"),
        ({"type": "function", "name": "shell"}, "shell"),
    ]:
        chat, _ = responses_to_chat({**request, "tool_choice": choice})
        assert chat["tool_choice"] == {"type": "function", "function": {"name": expected}}
        assert chat["messages"][1]["tool_calls"][0]["function"]["name"] == "mcp__srv__fetch"
    chat, dropped = responses_to_chat({**request, "tool_choice": {"type": "web_search"}})
    assert "tool_choice" not in chat and "tool_choice:web_search" in dropped
    chat, _ = responses_to_chat(
        {**request, "tool_choice": "required", "parallel_tool_calls": False}
    )
    assert (chat["tool_choice"], chat["parallel_tool_calls"]) == ("required", False)


def test_hosted_tools_only_leave_no_tools_upstream() -> None:
    chat, dropped = responses_to_chat(
        body(
            tools=[
                {"type": "web_search"},
                {"type": "file_search"},
                {"type": "computer_use_preview"},
                {"type": "local_shell"},
            ],
            tool_choice="required",
            parallel_tool_calls=True,
        )
    )
    assert "tools" not in chat and "tool_choice" not in chat and "parallel_tool_calls" not in chat
    assert set(dropped) == {"web_search", "file_search", "computer_use_preview", "local_shell"}


def test_an_input_that_is_neither_string_nor_list_is_refused() -> None:
    with pytest.raises(ClientRequestError):
        responses_to_chat({"model": "m", "input": 3})


def test_a_message_before_the_outputs_waits_for_them() -> None:
    chat, _ = responses_to_chat(body(user("go"), call("call_a"), user("hurry"), output("call_a")))
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "tool", "user"]
    assert chat["messages"][3]["content"] == "hurry"
