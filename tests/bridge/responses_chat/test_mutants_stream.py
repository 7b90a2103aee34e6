"""SPEC §8, §9: the Responses bridge's stream and request edges the mutation audit found
unpinned (a failure's status, code and usage; a damaged reasoning seal; a plain-text format;
a long value quoted in a refusal)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.bridge.responses_chat import responses_to_chat
from proxy.bridge.responses_chat.reasoning import seal
from proxy.core.errors import ClientRequestError, ProxyError
from tests.bridge.responses_chat.wire import body, output, run, user
from tests.chat.helpers import chunk, finish, role, sse, text, usage_chunk
from tests.responses.helpers import parse

JSON = dict[str, Any]


def failed_response(client: bytes) -> JSON:
    events = parse(client)
    assert events[-1]["type"] == "response.failed"
    response: JSON = events[-1]["response"]
    return response


def test_a_failed_response_says_failed_with_the_usage_so_far() -> None:
    usage = {**usage_chunk(), "usage": {"prompt_tokens": 7, "completion_tokens": 2}}
    error = {"error": {"message": "overloaded", "code": "busy"}}
    result = run(body(), [[sse(role(), text("Hi"), usage, error)]])
    response = failed_response(result.client)
    assert response["status"] == "failed"
    assert response["usage"] is not None
    assert (response["usage"]["input_tokens"], response["usage"]["output_tokens"]) == (7, 2)


def test_an_error_without_a_code_fails_as_a_server_error() -> None:
    result = run(body(), [])
    response = failed_response(result.exchange.stream_error(ProxyError("cut")))
    assert response["error"] == {"code": "server_error", "message": "cut"}


def test_a_damaged_reasoning_seal_is_named_not_unsealed() -> None:
    reasoning = {"type": "reasoning", "summary": [], "encrypted_content": seal("hidden") + "!!"}
    item = {"type": "message", "role": "assistant", "content": "done"}
    chat, dropped = responses_to_chat(body(user("q"), reasoning, item))
    assert "reasoning_content" not in chat["messages"][1]
    assert dropped == ("reasoning_items",)


def test_a_plain_text_format_asks_for_no_response_format() -> None:
    chat, dropped = responses_to_chat(body(text={"format": {"type": "text"}}))
    assert "response_format" not in chat
    assert dropped == ()


@pytest.mark.parametrize(
    ("call_id", "quoted"),
    [
        ("c" * 38, "'" + "c" * 38 + "'"),  # 40 characters: quoted whole
        ("c" * 39, "'" + "c" * 36 + "..."),  # 41: cut to 40
    ],
)
def test_a_refusal_quotes_a_long_value_cut_to_forty_characters(call_id: str, quoted: str) -> None:
    with pytest.raises(ClientRequestError) as raised:
        responses_to_chat(body(user("q"), output(call_id)))
    assert raised.value.message.startswith(
        f"No tool call found for function call output with call_id {quoted}."
    )


def test_reasoning_text_and_refusal_events_in_order_with_their_parts() -> None:
    stream = sse(
        role(), chunk({"reasoning": "R"}), text("T"), chunk({"refusal": "X"}), finish("stop")
    )
    events = parse(run(body(), [[stream]]).client)

    def shape(event: JSON) -> tuple[object, ...]:
        kind = event["type"]
        if kind == "response.output_item.added":
            item = event["item"]
            return (kind, item["type"], item.get("status"), item.get("content"))
        if kind in ("response.content_part.added", "response.content_part.done"):
            return (kind, event["content_index"], event["part"])
        if kind.endswith(".delta"):
            return (kind, event["content_index"], event["delta"])
        return (kind,)

    assert [shape(e) for e in events] == [
        ("response.created",),
        ("response.in_progress",),
        ("response.output_item.added", "reasoning", None, []),
        ("response.content_part.added", 0, {"type": "reasoning_text", "text": ""}),
        ("response.reasoning_text.delta", 0, "R"),
        ("response.reasoning_text.done",),
        ("response.content_part.done", 0, {"type": "reasoning_text", "text": "R"}),
        ("response.output_item.done",),
        ("response.output_item.added", "message", "in_progress", []),
        (
            "response.content_part.added",
            0,
            {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
        ),
        ("response.output_text.delta", 0, "T"),
        ("response.content_part.added", 1, {"type": "refusal", "refusal": ""}),
        ("response.refusal.delta", 1, "X"),
        ("response.output_text.done",),
        (
            "response.content_part.done",
            0,
            {"type": "output_text", "text": "T", "annotations": [], "logprobs": []},
        ),
        ("response.refusal.done",),
        ("response.content_part.done", 1, {"type": "refusal", "refusal": "X"}),
        ("response.output_item.done",),
        ("response.completed",),
    ]
