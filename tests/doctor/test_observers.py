"""Quirks no simulator profile shows, each from a hand-written raw response."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.doctor.observers import observe
from proxy.doctor.session import RecordedExchange
from proxy.doctor.views import view_of


def stream(*deltas: dict[str, Any], finish: str | None = "tool_calls") -> RecordedExchange:
    events = [
        {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas
    ]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    raw = b"".join(b"data: " + orjson.dumps(event) + b"\n\n" for event in events)
    exchange = RecordedExchange(
        "/chat/completions", "streaming", 1, {}, True, 200, raw + b"data: [DONE]\n\n"
    )
    return exchange


def header(index: int, call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    return {
        "tool_calls": [
            {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ]
    }


def codes(exchange: RecordedExchange) -> list[str]:
    return [finding.quirk.code for finding in observe([view_of(exchange)])]


def test_ids_other_clients_reject() -> None:
    long_id = "chatcmpl-tool-" + "a" * 32
    assert codes(stream(header(0, long_id, "get_time", '{"timezone":"UTC"}'))) == ["invalid_ids"]


def test_indexes_that_start_at_1() -> None:
    exchange = stream(
        header(1, "call_abcdefghijklmnopqrstuvwx", "get_time", '{"timezone":"UTC"}'),
        header(2, "call_bcdefghijklmnopqrstuvwxy", "get_weather", '{"city":"Oslo"}'),
    )
    assert codes(exchange) == ["sparse_index"]


def test_empty_arguments_and_tool_calls_claimed_without_calls() -> None:
    empty = stream(header(0, "call_abcdefghijklmnopqrstuvwx", "get_time"))
    assert codes(empty) == ["empty_arguments"]
    claimed = stream({"content": "Done."}, finish="tool_calls")
    assert codes(claimed) == ["tool_calls_without_calls"]


def test_the_openai_shape_reports_nothing() -> None:
    exchange = stream(
        {"role": "assistant", "content": ""},
        header(0, "call_abcdefghijklmnopqrstuvwx", "get_time"),
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"timezone":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '"UTC"}'}}]},
    )
    assert codes(exchange) == []
