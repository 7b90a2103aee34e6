"""SPEC §9, request direction: Responses content parts and assistant items as Chat content,
and an upstream error in the OpenAI shape, at the edges the mutation audit found unpinned."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.bridge.responses_chat import responses_to_chat, upstream_error
from tests.bridge.responses_chat.wire import body

JSON = dict[str, Any]


def user_parts(*parts: JSON) -> tuple[object, tuple[str, ...]]:
    chat, dropped = responses_to_chat(
        body({"type": "message", "role": "user", "content": list(parts)})
    )
    return chat["messages"][0]["content"], dropped


def text(value: str) -> JSON:
    return {"type": "input_text", "text": value}


def test_an_image_or_file_with_an_empty_reference_is_named_not_sent() -> None:
    content, dropped = user_parts(
        text("x"),
        {"type": "input_image", "image_url": ""},
        {"type": "input_file", "file_data": "", "filename": "a.pdf"},
    )
    assert content == "x"
    assert dropped == ("input_image.file_id", "input_file.file_id")


def test_a_file_by_url_is_named_as_such() -> None:
    content, dropped = user_parts(text("x"), {"type": "input_file", "file_url": "https://x/a.pdf"})
    assert content == "x"
    assert dropped == ("input_file.file_url",)


def assistant_text(content: object) -> object:
    item = {"type": "message", "role": "assistant", "content": content}
    chat, _ = responses_to_chat(body({"type": "message", "role": "user", "content": "q"}, item))
    return chat["messages"][1]["content"]


def test_an_assistant_items_text_and_refusal_parts_are_one_text() -> None:
    parts = [
        {"type": "output_text", "text": "I can't "},
        {"type": "refusal", "refusal": "do that."},
        {"type": "refusal", "text": "not this"},
    ]
    assert assistant_text(parts) == "I can't do that."


def test_an_assistant_item_without_content_is_empty_text() -> None:
    assert assistant_text(None) == ""


# -- upstream errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "invalid_request_error"), (499, "invalid_request_error"), (500, "upstream_error")],
)
def test_an_error_without_a_type_is_typed_by_its_status(status: int, kind: str) -> None:
    for raw in (b'{"error": {"message": "m"}}', b'{"error": {"message": "m", "type": ""}}'):
        error = orjson.loads(upstream_error(status, raw))["error"]
        assert (error["message"], error["type"]) == ("m", kind)


def test_an_error_body_that_is_no_utf8_is_quoted_with_replacement_characters() -> None:
    error = orjson.loads(upstream_error(502, b"\xff bad gateway "))["error"]
    assert error["message"] == "\ufffd bad gateway"


def test_an_include_value_that_is_no_string_is_named_include() -> None:
    _, dropped = responses_to_chat(body(include=[5, "reasoning.encrypted_content"]))
    assert dropped == ("include",)


def test_every_kind_of_text_part_is_text() -> None:
    content, dropped = user_parts(
        {"type": "output_text", "text": "a"},
        {"type": "text", "text": "b"},
        {"type": "refusal", "refusal": "c", "text": "not this"},
        {"type": "input_text"},
        {"type": "input_audio", "input_audio": {}},
    )
    assert content == "a\n\nb\n\nc\n\n"
    assert dropped == ("input_audio",)
