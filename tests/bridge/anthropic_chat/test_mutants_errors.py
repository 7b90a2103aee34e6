"""SPEC §9: an upstream's error answer in Anthropic's shape, and the proxy's own token count,
at the edges the mutation audit found unpinned."""

from __future__ import annotations

import json

from proxy.bridge.anthropic_chat import count_tokens_estimate, upstream_error


def message_of(status: int, body: bytes) -> object:
    error = json.loads(upstream_error(status, body))["error"]
    return error["message"]


def test_an_empty_message_gives_way_to_the_next_candidate() -> None:
    body = json.dumps({"error": {"message": ""}, "message": "the real one"}).encode()
    assert message_of(400, body) == "the real one"


def test_a_message_that_is_no_string_is_quoted_as_json() -> None:
    """FastAPI's `detail` is a list of objects: the client reads it as JSON text."""
    detail = [{"loc": ["body", "model"], "msg": "field required"}]
    body = json.dumps({"detail": detail}).encode()
    assert message_of(422, body) == json.dumps(detail, separators=(",", ":"))


def test_a_body_that_is_no_utf8_is_quoted_with_replacement_characters() -> None:
    assert message_of(502, b"\xff bad gateway ") == "\ufffd bad gateway"


def test_the_token_count_is_a_whole_number_of_four_bytes_at_least_one() -> None:
    assert count_tokens_estimate({}) == {"input_tokens": 1}
    # {"system":"abcd"} is 17 bytes: 4 tokens, not 4.25
    estimate = count_tokens_estimate({"system": "abcd"})
    assert estimate == {"input_tokens": 4}
    assert isinstance(estimate["input_tokens"], int)
