"""SPEC §9, request direction: the edges of content blocks that the mutation audit found
unpinned (defaults of a source's fields, what is named as dropped, damaged signatures)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from proxy.bridge.anthropic_chat import messages_to_chat
from proxy.bridge.anthropic_chat.reasoning import SIGNATURE_PREFIX, sign_reasoning
from proxy.core.errors import ClientRequestError

JSON = dict[str, Any]


def chat_of(*messages: JSON) -> tuple[JSON, tuple[str, ...]]:
    return messages_to_chat({"model": "kimi-k2", "max_tokens": 64, "messages": list(messages)})


def user(*blocks: JSON) -> JSON:
    return {"role": "user", "content": list(blocks)}


def text(value: str) -> JSON:
    return {"type": "text", "text": value}


def parts_of(*blocks: JSON) -> tuple[object, tuple[str, ...]]:
    """The single user message's content and what was dropped, for these blocks."""
    chat, dropped = chat_of(user(*blocks))
    (message,) = chat["messages"]
    return message["content"], dropped


# -- images ---------------------------------------------------------------------------------


def test_an_image_without_a_source_is_named_image() -> None:
    content, dropped = parts_of({"type": "image"}, text("x"))
    assert content == "x"
    assert dropped == ("image",)


def test_a_base64_image_without_media_type_or_data_gets_the_defaults() -> None:
    content, dropped = parts_of({"type": "image", "source": {"type": "base64"}}, text("x"))
    assert content == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,"}},
        {"type": "text", "text": "x"},
    ]
    assert dropped == ()


def test_only_a_url_source_with_a_string_url_is_a_url_image() -> None:
    """A `url` key on another kind of source, or a url source whose url is no string, has no
    Chat form."""
    blocks = [
        {"type": "image", "source": {"type": "file", "url": "https://example.com/a.png"}},
        {"type": "image", "source": {"type": "url", "url": 7}},
        text("x"),
    ]
    content, dropped = parts_of(*blocks)
    assert content == "x"
    assert dropped == ("image:file", "image:url")


# -- documents ------------------------------------------------------------------------------


def test_a_document_whose_source_is_no_object_is_named_not_a_crash() -> None:
    content, dropped = parts_of({"type": "document", "source": "x.pdf"}, text("x"))
    assert content == "x"
    assert dropped == ("document:None",)


def test_a_documents_citations_are_named() -> None:
    block = {"type": "document", "source": {"type": "text", "data": "A"}, "citations": {}}
    content, dropped = parts_of(block)
    assert content == "A"
    assert dropped == ("citations",)


def test_a_text_document_without_data_is_empty_text() -> None:
    content, dropped = parts_of({"type": "document", "source": {"type": "text"}})
    assert content == ""
    assert dropped == ()


def test_a_title_that_is_no_string_is_not_written() -> None:
    block = {"type": "document", "title": 5, "source": {"type": "text", "data": "A"}}
    pdf = {"type": "document", "title": 5, "source": {"type": "base64", "data": "QQ=="}}
    content, _ = parts_of(block, pdf)
    assert content == [
        {"type": "text", "text": "A"},
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,QQ==", "filename": "document.pdf"},
        },
    ]


def test_a_pdf_without_media_type_or_data_gets_the_defaults() -> None:
    content, _ = parts_of({"type": "document", "title": "", "source": {"type": "base64"}})
    assert content == [
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,", "filename": "document.pdf"},
        }
    ]


def test_a_pdf_keeps_its_media_type_and_title() -> None:
    source = {"type": "base64", "media_type": "application/x-pdf", "data": "QQ=="}
    content, _ = parts_of({"type": "document", "title": "Spec", "source": source})
    assert content == [
        {
            "type": "file",
            "file": {"file_data": "data:application/x-pdf;base64,QQ==", "filename": "Spec"},
        }
    ]


def test_a_content_documents_other_blocks_are_named_as_the_documents() -> None:
    inner = [text("B"), {"type": "image", "source": {"type": "url", "url": "u"}}]
    block = {"type": "document", "source": {"type": "content", "content": inner}}
    content, dropped = parts_of(block)
    assert content == "B"
    assert dropped == ("document:image",)


def test_a_content_document_that_is_no_list_is_refused_in_words_naming_the_document() -> None:
    block = {"type": "document", "source": {"type": "content", "content": 3}}
    with pytest.raises(ClientRequestError) as raised:
        parts_of(block)
    assert raised.value.message == (
        "a document message's content must be a string or a list of blocks"
    )


# -- thinking -------------------------------------------------------------------------------


def assistant_reasoning(block: JSON) -> object:
    chat, _ = chat_of(user(text("q")), {"role": "assistant", "content": [block, text("a")]})
    return chat["messages"][1].get("reasoning_content")


def test_a_damaged_proxy_signature_falls_back_to_the_blocks_text() -> None:
    damaged = SIGNATURE_PREFIX + "not base64!"
    block = {"type": "thinking", "thinking": "seen", "signature": damaged}
    assert assistant_reasoning(block) == "seen"
    assert assistant_reasoning({"type": "thinking", "signature": damaged}) == ""


def test_a_signature_with_characters_outside_base64_is_damaged() -> None:
    """Strict base64: junk after a valid encoding does not decode to a text the proxy never
    signed."""
    signed = sign_reasoning("hidden")
    block = {"type": "thinking", "thinking": "shown", "signature": signed + "!!"}
    assert assistant_reasoning(block) == "shown"


def test_a_signature_of_bytes_that_are_no_utf8_is_damaged() -> None:
    sig = SIGNATURE_PREFIX + base64.b64encode(b"\xff\xfe").decode()
    assert assistant_reasoning({"type": "thinking", "thinking": "t", "signature": sig}) == "t"


def test_only_text_blocks_make_the_system_prompt() -> None:
    body = {
        "model": "kimi-k2",
        "max_tokens": 64,
        "system": [text("be brief"), {"type": "note", "text": "not a text block"}],
        "messages": [user(text("x"))],
    }
    chat, dropped = messages_to_chat(body)
    assert chat["messages"][0] == {"role": "system", "content": "be brief"}
    assert dropped == ("system:note",)


def test_ids_of_other_forms_are_quoted_as_they_came() -> None:
    """Only `call_X` (X not empty) reads as `toolu_X`: a bare `call_` or another form stays."""
    for tool_id in ("call_", "functions.Bash:0"):
        answer = {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}
        with pytest.raises(ClientRequestError) as raised:
            chat_of(user(text("q")), {"role": "assistant", "content": "a"}, user(answer))
        assert f"found in `tool_result` blocks: '{tool_id}'." in raised.value.message


# -- tool calls and results -------------------------------------------------------------------


def test_a_tool_block_without_its_id_is_refused_in_words_naming_the_block() -> None:
    use = {"type": "tool_use", "name": "Bash", "input": {}}
    with pytest.raises(ClientRequestError) as raised:
        chat_of(user(text("q")), {"role": "assistant", "content": [use]})
    assert raised.value.message == "every tool_use block needs an `id` string"
    answer = {"type": "tool_result", "content": "ok"}
    with pytest.raises(ClientRequestError) as raised:
        chat_of(user(answer))
    assert raised.value.message == "every tool_result block needs an `tool_use_id` string"


def turn(use: JSON, *result_blocks: JSON) -> list[JSON]:
    return chat_of(user(text("q")), {"role": "assistant", "content": [use]}, user(*result_blocks))[
        0
    ]["messages"]


def test_a_tool_use_as_it_goes_upstream() -> None:
    """An input sent as JSON text stays that text; no name is an empty name; `toolu_` alone
    is no prefixed id."""
    use = {"type": "tool_use", "id": "toolu_", "input": '{"command": "ls"}'}
    messages = turn(use, {"type": "tool_result", "tool_use_id": "toolu_", "content": "ok"})
    assert messages[1]["tool_calls"] == [
        {
            "id": "toolu_",
            "type": "function",
            "function": {"name": "", "arguments": '{"command": "ls"}'},
        }
    ]
    assert messages[2]["tool_call_id"] == "toolu_"


def test_a_results_content_edges() -> None:
    use = {"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {}}
    empty = turn(use, {"type": "tool_result", "tool_use_id": "toolu_a"})
    assert empty[2] == {"role": "tool", "tool_call_id": "call_a", "content": ""}
    blocks = [{"type": "image"}, text("after")]
    kept = turn(use, {"type": "tool_result", "tool_use_id": "toolu_a", "content": blocks})
    assert kept[2]["content"] == "after"
    bad = {"type": "tool_result", "tool_use_id": "toolu_a", "content": 5}
    with pytest.raises(ClientRequestError) as raised:
        turn(use, bad)
    assert raised.value.message == (
        "a tool_result message's content must be a string or a list of blocks"
    )


def test_an_assistant_text_block_without_text_is_empty() -> None:
    chat, _ = chat_of(
        user(text("q")), {"role": "assistant", "content": [{"type": "text"}, text("a")]}
    )
    assert chat["messages"][1]["content"] == "a"


def test_the_proxys_thinking_blocks_join_into_one_reasoning_text() -> None:
    blocks = [
        {"type": "thinking", "thinking": "a", "signature": sign_reasoning("a")},
        {"type": "thinking", "thinking": "b", "signature": sign_reasoning("b")},
        text("done"),
    ]
    chat, _ = chat_of(user(text("q")), {"role": "assistant", "content": blocks})
    assert chat["messages"][1]["reasoning_content"] == "ab"


def test_a_tool_without_a_name_is_refused_and_one_without_a_schema_takes_any_object() -> None:
    body = {"model": "kimi-k2", "max_tokens": 64, "messages": [user(text("q"))]}
    with pytest.raises(ClientRequestError) as raised:
        messages_to_chat({**body, "tools": [{"description": "no name"}]})
    assert raised.value.message == "every tool must be an object with a name"
    chat, _ = messages_to_chat({**body, "tools": [{"name": "Bash", "input_schema": "x"}]})
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}
    ]
