"""SPEC §9: the response object the Responses bridge builds (what it echoes of the request
by default, the request's model and a zero `created_at` when the upstream names none, its
fixed fields), its usage total, an odd finish reason, and a custom tool's input taken from
the arguments the upstream wrote (the mutation audit found these unpinned)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.bridge.responses_chat.wire import APPLY_PATCH, body, run
from tests.chat.helpers import chunk, finish, header, role, sse, text, usage_chunk
from tests.responses.helpers import check_grammar, parse

JSON = dict[str, Any]


def completed(request: JSON, upstream: bytes) -> JSON:
    events = parse(run(request, [[upstream]]).client)
    response: JSON = check_grammar(events)
    return response


def test_a_response_echoes_the_defaults_and_the_requests_model() -> None:
    request = {"model": "kimi-k2", "input": "hi", "store": False, "stream": True}
    bare = [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]
    # The upstream names no model and no `created`.
    upstream = sse(
        {"choices": bare}, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    )
    response = completed(request, upstream)
    del response["id"], response["output"], response["usage"]
    assert response == {
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "kimi-k2",
        "error": None,
        "incomplete_details": None,
        "previous_response_id": None,
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }


@pytest.mark.parametrize(
    ("total", "expected"), [({"total_tokens": 100}, 100), ({}, 9)], ids=["given", "summed"]
)
def test_the_usage_total_is_the_upstreams_or_the_sum(total: JSON, expected: int) -> None:
    usage = usage_chunk(7, 2)
    usage["usage"] = {"prompt_tokens": 7, "completion_tokens": 2, **total}
    response = completed(body(), sse(role(), text("Hi"), finish("stop"), usage))
    assert response["usage"]["total_tokens"] == expected


@pytest.mark.parametrize("reason", [["length"], {"why": "length"}], ids=["list", "object"])
def test_a_finish_reason_that_is_no_string_completes_the_response(reason: object) -> None:
    response = completed(body(), sse(role(), text("Hi"), finish(reason)))
    assert (response["status"], response["incomplete_details"]) == ("completed", None)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"input": "A", "note": "B"}, "A"),
        ({"patch": "P"}, "P"),
        ({"n": 1, "patch": "P"}, '{"n": 1, "patch": "P"}'),
        ("*** Begin Patch", "*** Begin Patch"),
    ],
    ids=["input-among-others", "one-string", "no-input-and-more", "not-json"],
)
def test_a_custom_tools_input_from_the_arguments_the_upstream_wrote(
    arguments: JSON | str, expected: str
) -> None:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = chunk({"tool_calls": [header(0, "call_p", str(APPLY_PATCH["name"]), raw)]})
    events = parse(run(body(), [[sse(role(), call, finish())]]).client)
    done = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert [e["input"] for e in done] == [expected]
    assert check_grammar(events)["output"][0]["input"] == expected
