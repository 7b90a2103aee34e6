"""SPEC §11 on the bridges: a Responses or Anthropic history whose calls and results do not
pair is repaired into a Chat history the upstream accepts (every call answered by the `tool`
messages right after it, each once), and the repairs are reported; with `request_repair: off`
it is refused as the client's own API refuses it (tests/bridge/fuzz/test_bridge_fuzz_findings.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.bridge.anthropic_chat import new_anthropic_over_chat
from proxy.bridge.responses_chat.exchange import new_responses_over_chat
from proxy.core.request_repair import MISSING_RESULT
from proxy.core.rounds import RouteRules
from tests.bridge.fuzz.fuzz_grammar import check_chat_request

JSON = dict[str, Any]


def entropy(n: int) -> bytes:
    return b"\x11" * n


def call(call_id: str) -> JSON:
    return {"type": "function_call", "call_id": call_id, "name": "shell", "arguments": "{}"}


def output(call_id: str) -> JSON:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def user(text: str) -> JSON:
    return {"type": "message", "role": "user", "content": text}


def tool_use(tool_id: str) -> JSON:
    return {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {}}


def tool_result(tool_id: str) -> JSON:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}


def kinds(exchange: Any) -> list[str]:
    return [note.kind for note in exchange.report()[0]]


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([user("go"), call("call_a")], ["missing_result"]),
        ([user("go"), call("call_a"), user("and?")], ["missing_result"]),
        ([user("go"), output("call_z")], ["orphan_result"]),
        ([user("go"), call("call_a"), output("call_b")], ["missing_result", "orphan_result"]),
        ([user("go"), call("call_a"), output("call_a"), output("call_a")], ["duplicate_result"]),
    ],
)
def test_responses_unpaired_histories_are_repaired(items: list[JSON], expected: list[str]) -> None:
    exchange = new_responses_over_chat({"input": items}, b"", RouteRules(), entropy)
    chat = check_chat_request(exchange.upstream_request)
    assert sorted(kinds(exchange)) == expected
    if "missing_result" in expected:
        assert any(m.get("content") == MISSING_RESULT for m in chat["messages"])


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [tool_use("toolu_a")]},
            ],
            ["missing_result"],
        ),
        (
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [tool_use("toolu_a")]},
                {"role": "user", "content": "no result"},
            ],
            ["missing_result"],
        ),
        ([{"role": "user", "content": [tool_result("toolu_z")]}], ["orphan_result"]),
    ],
)
def test_anthropic_unpaired_histories_are_repaired(
    messages: list[JSON], expected: list[str]
) -> None:
    exchange = new_anthropic_over_chat({"messages": messages}, b"", RouteRules(), entropy)
    check_chat_request(exchange.upstream_request)
    assert kinds(exchange) == expected
