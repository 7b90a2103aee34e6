"""The whole-message direction and upstream errors (SPEC §9): a `chat.completion` as a
Responses `response`, the same items, status and usage as the stream; an upstream's error
in the OpenAI shape with its message kept."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from proxy.bridge.responses_chat import upstream_error
from proxy.bridge.responses_chat.reasoning import seal
from proxy.core.events import UpstreamBroken
from tests.bridge.responses_chat.test_stream import sdk_client
from tests.bridge.responses_chat.wire import APPLY_PATCH, PATCH, SHELL, body, run


def completion(message: dict[str, Any], finish: str = "tool_calls", **extra: Any) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "kimi-k2-thinking",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            **extra,
        }
    )


MESSAGE = {
    "role": "assistant",
    "content": "Running.",
    "reasoning_content": "Need ls.",
    "tool_calls": [
        {
            "id": "functions.shell:0",
            "type": "function",
            "function": {"name": "shell", "arguments": '{"cmd":"ls"}'},
        },
        {
            "id": "functions.apply_patch:1",
            "type": "function",
            "function": {"name": "apply_patch", "arguments": json.dumps({"input": PATCH})},
        },
    ],
}
USAGE = {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57}


def answer(raw: bytes, request: dict[str, Any] | None = None) -> dict[str, Any]:
    result = run(request or body(stream=False), [[raw]], stream=False)
    assert result.last is not None and result.last.last
    return orjson.loads(result.client)  # type: ignore[no-any-return]


def test_a_whole_message_becomes_a_response_object() -> None:
    response = answer(completion(MESSAGE, usage=USAGE))
    assert response["object"] == "response" and response["id"].startswith("resp_")
    assert (response["status"], response["created_at"], response["model"]) == (
        "completed",
        1700000000,
        "kimi-k2-thinking",
    )
    reasoning, message, function, custom = response["output"]
    assert reasoning["encrypted_content"] == seal("Need ls.")
    assert message["content"][0]["text"] == "Running." and message["status"] == "completed"
    # Kimi's recurring ids were made unique by the Chat exchange before they came here.
    assert function["call_id"].startswith("call_1_0_") and function["arguments"] == '{"cmd":"ls"}'
    assert (custom["type"], custom["input"]) == ("custom_tool_call", PATCH)
    assert custom["call_id"].startswith("call_1_1_")
    assert response["usage"] == {
        "input_tokens": 50,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 57,
    }
    assert response["tools"] == [SHELL, APPLY_PATCH]


def test_the_openai_sdk_parses_the_response_object() -> None:
    raw = run(body(stream=False), [[completion(MESSAGE, usage=USAGE)]], stream=False).client
    parsed = sdk_client(raw, "application/json").responses.create(model="m", input="go")
    assert [item.type for item in parsed.output] == [
        "reasoning",
        "message",
        "function_call",
        "custom_tool_call",
    ]
    assert parsed.output_text == "Running."
    assert parsed.usage is not None and parsed.usage.total_tokens == 57


def test_a_length_finish_is_incomplete_and_a_plain_answer_has_only_its_message() -> None:
    response = answer(completion({"role": "assistant", "content": "Half"}, "length"))
    assert (response["status"], response["incomplete_details"]) == (
        "incomplete",
        {"reason": "max_output_tokens"},
    )
    assert [i["type"] for i in response["output"]] == ["message"]
    assert response["output"][0]["status"] == "incomplete"
    assert response["usage"] is None


def test_a_body_that_is_not_json_is_a_broken_upstream_and_an_error_body_passes() -> None:
    result = run(body(stream=False), [[b"<html>bad gateway</html>"]], stream=False)
    assert isinstance(result.end, UpstreamBroken) and result.client == b""
    assert result.end.error.status == 502
    error = b'{"error":{"message":"model overloaded","type":"server_error","code":null}}'
    assert run(body(stream=False), [[error]], stream=False).client == error


@pytest.mark.parametrize(
    ("status", "raw", "expected"),
    [
        (
            400,
            b'{"error":{"message":"bad tool schema","type":"BadRequestError","code":400,"param":"tools"}}',
            {
                "message": "bad tool schema",
                "type": "BadRequestError",
                "code": "400",
                "param": "tools",
            },
        ),
        (
            429,
            b'{"error":"rate limited","message":"ignored"}',
            {
                "message": "rate limited",
                "type": "invalid_request_error",
                "code": None,
                "param": None,
            },
        ),
        (
            422,
            b'{"object":"error","message":"context too long","type":"BadRequestError","code":422}',
            {
                "message": "context too long",
                "type": "BadRequestError",
                "code": "422",
                "param": None,
            },
        ),
        (
            502,
            b"<html>Bad Gateway</html>",
            {
                "message": "<html>Bad Gateway</html>",
                "type": "upstream_error",
                "code": None,
                "param": None,
            },
        ),
        (
            503,
            b"",
            {
                "message": "the upstream answered HTTP 503",
                "type": "upstream_error",
                "code": None,
                "param": None,
            },
        ),
    ],
)
def test_upstream_errors_keep_their_message_in_the_openai_shape(
    status: int, raw: bytes, expected: dict[str, Any]
) -> None:
    assert orjson.loads(upstream_error(status, raw)) == {"error": expected}
