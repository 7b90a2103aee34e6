"""SPEC §8: the exchange's grammar (`exchange.py`) at the edges the mutation audit found
unpinned (the placeholder `message_start` a stream's error needs, and only once)."""

from __future__ import annotations

import orjson

from proxy.anthropic.exchange import AnthropicExchange
from proxy.core.errors import UpstreamStreamError
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import parse, request


def fresh(model: object = "kimi-k2") -> AnthropicExchange:
    body = request(model=model)  # type: ignore[arg-type]
    exchange = AnthropicExchange(body, orjson.dumps(body), RouteRules())
    exchange.begin_round(stream=True)
    return exchange


def test_an_error_before_any_byte_comes_after_a_placeholder_message_start() -> None:
    sent = fresh().stream_error(UpstreamStreamError("the upstream went away"))
    [(name, start), (error_name, _)] = parse(sent)
    assert (name, error_name) == ("message_start", "error")
    assert start == {
        "type": "message_start",
        "message": {
            "id": "msg_toolcall_proxy_error",
            "type": "message",
            "role": "assistant",
            "model": "kimi-k2",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        },
    }


def test_a_model_that_is_not_a_string_names_the_placeholder_by_nothing() -> None:
    sent = fresh(model=5).stream_error(UpstreamStreamError("gone"))
    start = parse(sent)[0][1]
    assert isinstance(start, dict) and start["message"]["model"] == ""


def test_a_second_error_sends_no_second_message_start() -> None:
    exchange = fresh()
    exchange.stream_error(UpstreamStreamError("gone"))
    again = exchange.stream_error(UpstreamStreamError("gone"))
    assert [name for name, _ in parse(again)] == ["error"]
