"""SPEC §9, request direction: every field of an Anthropic body has a fate in the Chat body,
mapped or named as dropped; recorded Claude Code requests first."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from proxy.bridge.anthropic_chat import messages_to_chat
from proxy.bridge.anthropic_chat.reasoning import sign_reasoning
from proxy.core.errors import ClientRequestError
from tests.bridge.anthropic_chat.bridge_wire import BASH_SCHEMA, BASH_TOOL, claude_code_request

JSON = dict[str, Any]


def chat_of(body: JSON) -> tuple[JSON, tuple[str, ...]]:
    return messages_to_chat({"model": "kimi-k2", "max_tokens": 64, **body})


def user(*blocks: JSON) -> JSON:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: JSON) -> JSON:
    return {"role": "assistant", "content": list(blocks)}


def text(value: str) -> JSON:
    return {"type": "text", "text": value}


def tool_use(call_id: str, command: str) -> JSON:
    return {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}


def result(call_id: str, content: Any, **extra: Any) -> JSON:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


# -- recorded Claude Code requests ------------------------------------------------------------


def test_claude_code_first_turn_every_field() -> None:
    body = claude_code_request("01-first-turn")
    chat, dropped = messages_to_chat(body)
    assert set(chat) == {"model", "messages", "tools", "max_tokens", "user", "stream"} | {
        "stream_options"
    }
    assert chat["model"] == "kimi-k2"
    assert chat["max_tokens"] == 32000
    assert chat["user"] == body["metadata"]["user_id"]
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}
    # The system blocks become one leading system message, in order.
    system = chat["messages"][0]
    assert system["role"] == "system"
    assert system["content"] == "\n\n".join(block["text"] for block in body["system"])
    # The system message Claude Code puts inside `messages` stays in place (after the user's).
    roles = [message["role"] for message in chat["messages"]]
    assert roles == ["system", "user", "system"]
    assert chat["messages"][2]["content"] == body["messages"][1]["content"][0]["text"]
    # The user's two text blocks stay two text parts.
    assert chat["messages"][1]["content"] == body["messages"][0]["content"]
    # Every custom tool is a function tool with its schema.
    tools = body["tools"]
    assert [t["function"]["name"] for t in chat["tools"]] == [t["name"] for t in tools]
    for mapped, tool in zip(chat["tools"], tools, strict=True):
        assert mapped["type"] == "function"
        assert mapped["function"]["parameters"] == tool["input_schema"]
        assert mapped["function"]["description"] == tool["description"]
        assert "defer_loading" not in mapped["function"]
    assert set(dropped) == {
        "cache_control",
        "thinking",
        "context_management",
        "output_config",
        "defer_loading",
    }


def test_claude_code_tool_results_follow_the_order_of_the_calls() -> None:
    """The recorded turn answers Read:1 before Bash:0; Chat gets them in the calls' order."""
    chat, dropped = messages_to_chat(claude_code_request("02-parallel-tool-use"))
    messages = chat["messages"]
    call_turn = next(i for i, m in enumerate(messages) if m.get("tool_calls"))
    call = messages[call_turn]
    assert call["content"] == "Listing the directory and reading the notes."
    assert [c["id"] for c in call["tool_calls"]] == ["functions.Bash:0", "functions.Read:1"]
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {
        "command": "ls /scratch/work",
        "description": "List",
    }
    tools = messages[call_turn + 1 :]
    assert [(m["role"], m["tool_call_id"]) for m in tools] == [
        ("tool", "functions.Bash:0"),
        ("tool", "functions.Read:1"),
    ]
    assert tools[0]["content"] == "notes.txt"
    # The thinking block carries Anthropic's own signature: no Chat upstream can read it.
    assert "reasoning_content" not in call
    assert "thinking_block" in dropped


def test_claude_code_error_result_keeps_its_text_marked() -> None:
    chat, _ = messages_to_chat(claude_code_request("03-tool-error"))
    answers = {m["tool_call_id"]: m["content"] for m in chat["messages"] if m["role"] == "tool"}
    assert answers["functions.Read:3"] == (
        "Error: File does not exist. Note: your current working directory is /scratch/work."
    )
    assert answers["functions.Write:2"].startswith("File created successfully")
    # An assistant message of calls only has empty text content.
    write_turn = next(
        m for m in chat["messages"] if m.get("tool_calls", [{}])[0].get("id") == "functions.Write:2"
    )
    assert write_turn["content"] == ""


# -- user turns ---------------------------------------------------------------------------------


def test_tool_results_go_before_the_turns_text() -> None:
    chat, _ = chat_of(
        {
            "messages": [
                user(text("go")),
                assistant(tool_use("toolu_a", "ls"), tool_use("toolu_b", "pwd")),
                user(
                    text("before"), result("toolu_b", "/w"), result("toolu_a", "x"), text("after")
                ),
            ]
        }
    )
    tail = chat["messages"][1:]
    assert tail[0]["role"] == "assistant"
    assert [(m["role"], m.get("tool_call_id")) for m in tail[1:3]] == [
        ("tool", "call_a"),
        ("tool", "call_b"),
    ]
    assert tail[3] == {
        "role": "user",
        "content": [{"type": "text", "text": "before"}, {"type": "text", "text": "after"}],
    }
    assert len(tail) == 4


def test_tool_result_blocks_and_images() -> None:
    """Text blocks of a result are its text; its images follow in a user message (few Chat
    upstreams take images in a tool message), before the turn's own text."""
    png = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    content = [text("line 1"), {"type": "image", "source": png}, text("line 2")]
    chat, _ = chat_of(
        {
            "messages": [
                user(text("look")),
                assistant(tool_use("toolu_s", "shot")),
                user(result("toolu_s", content, is_error=True), text("what is it?")),
            ]
        }
    )
    tool, follow = chat["messages"][2:]
    assert tool == {"role": "tool", "tool_call_id": "call_s", "content": "Error: line 1\nline 2"}
    assert follow == {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "text", "text": "what is it?"},
        ],
    }


def test_images_base64_and_url() -> None:
    blocks = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
        text("describe"),
    ]
    chat, dropped = chat_of({"messages": [user(*blocks)]})
    assert chat["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAA"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "text", "text": "describe"},
    ]
    assert dropped == ("image:file",)


def test_documents_text_pdf_and_url() -> None:
    pdf = base64.b64encode(b"%PDF-1.4").decode()
    blocks = [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "A"}},
        {
            "type": "document",
            "title": "Spec",
            "source": {"type": "content", "content": [text("B1"), text("B2")]},
        },
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
        },
        {"type": "document", "source": {"type": "url", "url": "https://example.com/x.pdf"}},
    ]
    chat, dropped = chat_of({"messages": [user(*blocks)]})
    assert chat["messages"][0]["content"] == [
        {"type": "text", "text": "A"},
        {"type": "text", "text": "Spec\n\nB1\n\nB2"},
        {
            "type": "file",
            "file": {"file_data": f"data:application/pdf;base64,{pdf}", "filename": "document.pdf"},
        },
    ]
    assert dropped == ("document:url",)


def test_a_single_text_is_a_plain_string() -> None:
    chat, dropped = chat_of({"messages": [{"role": "user", "content": "hi"}], "system": "be brief"})
    assert chat["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert dropped == ()
    assert "stream" not in chat and "stream_options" not in chat


# -- assistant turns ----------------------------------------------------------------------------


def test_proxy_thinking_goes_back_as_reasoning_content() -> None:
    """The text the signature carries goes back, whatever the client kept of `thinking`
    (Claude Code asks for thinking with display `omitted`)."""
    signed = {"type": "thinking", "thinking": "", "signature": sign_reasoning("I should list. ✓")}
    foreign = {"type": "thinking", "thinking": "x", "signature": "EqQBCgIYAhIM"}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgB"}
    chat, dropped = chat_of(
        {
            "messages": [
                user(text("go")),
                assistant(signed, foreign, redacted, text("Listing."), tool_use("toolu_1", "ls")),
                user(result("toolu_1", "a.txt")),
            ]
        }
    )
    turn = chat["messages"][1]
    assert turn["reasoning_content"] == "I should list. ✓"
    assert turn["content"] == "Listing."
    assert turn["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "Bash", "arguments": '{"command":"ls"}'},
        }
    ]
    assert dropped == ("thinking_block", "redacted_thinking")


def test_tool_ids_toolu_to_call_and_others_kept() -> None:
    chat, _ = chat_of(
        {
            "messages": [
                user(text("go")),
                assistant(
                    tool_use("toolu_2_0_abcd1234", "ls"), tool_use("chatcmpl-tool-9f", "pwd")
                ),
                user(result("toolu_2_0_abcd1234", "a"), result("chatcmpl-tool-9f", "/")),
            ]
        }
    )
    calls = chat["messages"][1]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_2_0_abcd1234", "chatcmpl-tool-9f"]
    assert [m["tool_call_id"] for m in chat["messages"][2:]] == [
        "call_2_0_abcd1234",
        "chatcmpl-tool-9f",
    ]


def test_server_tool_blocks_in_history_are_named() -> None:
    server = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    found = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    chat, dropped = chat_of(
        {"messages": [user(text("q")), assistant(server, found, text("It is sunny."))]}
    )
    assert chat["messages"][1] == {"role": "assistant", "content": "It is sunny."}
    assert dropped == ("server_tool_use", "web_search_tool_result")


# -- tools and sampling -------------------------------------------------------------------------


def test_server_tools_are_dropped_and_named() -> None:
    tools = [
        BASH_TOOL,
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"type": "custom", "name": "Read", "input_schema": {"type": "object"}, "strict": True},
    ]
    chat, dropped = chat_of({"messages": [user(text("q"))], "tools": tools})
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {"name": "Bash", "description": "Run a command", "parameters": BASH_SCHEMA},
        },
        {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}},
    ]
    assert dropped == ("web_search_20250305", "bash_20250124", "text_editor_20250728", "strict")


@pytest.mark.parametrize(
    ("choice", "mapped", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        (
            {"type": "tool", "name": "Bash"},
            {"type": "function", "function": {"name": "Bash"}},
            None,
        ),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
        ({"type": "any", "disable_parallel_tool_use": True}, "required", False),
    ],
)
def test_tool_choice(choice: JSON, mapped: object, parallel: bool | None) -> None:
    chat, dropped = chat_of(
        {"messages": [user(text("q"))], "tools": [BASH_TOOL], "tool_choice": choice}
    )
    assert chat["tool_choice"] == mapped
    assert chat.get("parallel_tool_calls") == parallel
    assert dropped == ()


def test_tool_choice_of_a_dropped_tool_is_named() -> None:
    tools = [BASH_TOOL, {"type": "web_search_20250305", "name": "web_search"}]
    choice = {"type": "tool", "name": "web_search"}
    chat, dropped = chat_of({"messages": [user(text("q"))], "tools": tools, "tool_choice": choice})
    assert "tool_choice" not in chat
    assert dropped == ("web_search_20250305", "tool_choice")


def test_sampling_and_metadata() -> None:
    chat, dropped = chat_of(
        {
            "messages": [user(text("q"))],
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 40,
            "stop_sequences": ["</done>", "STOP"],
            "metadata": {"user_id": "u-1", "trace": "t"},
            "service_tier": "auto",
            "stream": False,
        }
    )
    assert chat["temperature"] == 0.2
    assert chat["top_p"] == 0.9
    assert chat["max_tokens"] == 64
    assert chat["stop"] == ["</done>", "STOP"]
    assert chat["user"] == "u-1"
    assert "top_k" not in chat and "stream" not in chat
    assert set(dropped) == {"top_k", "metadata.trace", "service_tier"}


@pytest.mark.parametrize(
    "messages",
    [
        ["not an object"],
        [{"role": "tool", "content": "x"}],
        [{"role": "user", "content": 7}],
    ],
)
def test_bodies_the_bridge_cannot_serve(messages: list[Any]) -> None:
    with pytest.raises(ClientRequestError):
        chat_of({"messages": messages})
