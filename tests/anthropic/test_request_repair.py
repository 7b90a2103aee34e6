"""SPEC §11 on Anthropic Messages: every `tool_use` answered at the start of the next user
message, results with no call kept as marked text, `input` an object, empty schemas filled.

Anthropic's refusals these rules answer: "messages.N: `tool_use` ids were found without
`tool_result` blocks immediately after: toolu_... Each `tool_use` block must have a
corresponding `tool_result` block in the next message.", "messages.N.content.0: unexpected
`tool_use_id` found in `tool_result` blocks: ... Each `tool_result` block must have a
corresponding `tool_use` block in the previous message.", and "tool_result blocks must come
first" ("messages.N: `tool_use` ids were found without `tool_result` blocks immediately
after" when a text block leads); "tools.0.input_schema: Field required"."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.anthropic.exchange import AnthropicExchange
from proxy.anthropic.request import translate_messages
from proxy.core.notes import DeltaRepaired
from proxy.core.request_repair import MISSING_RESULT
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import assistant, request, results, tool_use

LS = {"command": "ls"}
PWD = {"command": "pwd"}


def repaired(*messages: Any, dialect: str = "passthrough", **extra: Any) -> Any:
    return translate_messages(request(*messages, **extra), dialect, repair=True)


def kinds(translated: Any) -> list[str]:
    return [note.kind for note in translated.repairs]


def first_refusal(messages: list[dict[str, Any]]) -> str | None:
    """What Anthropic checks: the message after an assistant message with tool_use blocks is
    a user message whose first blocks are their tool_results, and every tool_result answers a
    tool_use of the message before it."""
    owed: list[str] = []
    for message in messages:
        content = message["content"] if isinstance(message["content"], list) else []
        answers = []
        for at, block in enumerate(content):
            if block["type"] == "tool_result":
                if block["tool_use_id"] not in owed or at != len(answers):
                    return f"unexpected or late {block['tool_use_id']}"
                answers.append(block["tool_use_id"])
        missing = [tool_id for tool_id in owed if tool_id not in answers]
        if missing:
            return f"without tool_result {missing}"
        owed = [b["id"] for b in content if b["type"] == "tool_use"]
    return f"without tool_result {owed}" if owed else None


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def test_an_interrupted_call_gets_an_error_result_first_in_the_next_message() -> None:
    messages = [
        assistant(tool_use("toolu_a", "Bash", LS), tool_use("toolu_b", "Bash", PWD)),
        {"role": "user", "content": [text("[Request interrupted by user]")]},
    ]
    tr = repaired(*messages)
    assert first_refusal(request(*messages)["messages"]) is not None
    sent = tr.body["messages"]
    assert first_refusal(sent) is None
    assert sent[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_a",
            "content": MISSING_RESULT,
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_b",
            "content": MISSING_RESULT,
            "is_error": True,
        },
        text("[Request interrupted by user]"),
    ]
    assert kinds(tr) == ["missing_result", "missing_result"]
    assert set(tr.facts.answered) == set()  # SPEC §5/§10: no answered call


def test_a_user_message_is_created_where_there_is_none() -> None:
    tr = repaired(assistant(tool_use("toolu_a", "Bash", LS)), assistant(text("then")))
    sent = tr.body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant"]
    assert sent[2]["content"][0]["tool_use_id"] == "toolu_a"
    tr = repaired(assistant(tool_use("toolu_a", "Bash", LS)))
    assert tr.body["messages"][-1]["role"] == "user" and first_refusal(tr.body["messages"]) is None


def test_a_string_user_message_after_a_call_keeps_its_text_after_the_result() -> None:
    tr = repaired(assistant(tool_use("toolu_a", "Bash", LS)), {"role": "user", "content": "stop"})
    assert tr.body["messages"][2]["content"][1:] == [text("stop")]


def test_a_result_further_down_moves_up_and_an_emptied_message_goes() -> None:
    messages = [
        assistant(tool_use("toolu_a", "Bash", LS)),
        {"role": "user", "content": [text("wait")]},
        results("toolu_a"),
        assistant(text("done")),
    ]
    tr = repaired(*messages)
    sent = tr.body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant"]
    assert sent[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "ok"},
        text("wait"),
    ]
    assert kinds(tr) == ["result_moved"]
    assert set(tr.facts.answered) == {"toolu_a"}


def test_results_come_before_other_blocks() -> None:
    message = {
        "role": "user",
        "content": [
            text("reminder"),
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "ok"},
        ],
    }
    tr = repaired(assistant(tool_use("toolu_a", "Bash", LS)), message)
    assert [b["type"] for b in tr.body["messages"][2]["content"]] == ["tool_result", "text"]
    assert kinds(tr) == ["result_order"]


def test_orphan_and_duplicate_results_become_marked_text_blocks() -> None:
    message = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_gone", "content": "lost output"},
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": [text("again")]},
        ],
    }
    tr = repaired(assistant(tool_use("toolu_a", "Bash", LS)), message)
    content = tr.body["messages"][2]["content"]
    assert content[0] == {"type": "tool_result", "tool_use_id": "toolu_a", "content": "ok"}
    assert content[1]["type"] == "text" and content[1]["text"].endswith("lost output")
    assert content[2]["type"] == "text" and "Bash" in content[2]["text"]
    assert content[3] == text("again")
    assert sorted(kinds(tr)) == ["duplicate_result", "orphan_result"]
    assert first_refusal(tr.body["messages"]) is None


def test_an_input_that_is_no_object_is_made_one() -> None:
    cut = {
        "type": "tool_use",
        "id": "toolu_a",
        "name": "Write",
        "input": '{"path": "a", "text": "x',
    }
    tr = repaired(assistant(cut), results("toolu_a"))
    assert tr.body["messages"][1]["content"][0]["input"] == {"path": "a"}
    assert kinds(tr) == ["history_arguments"]


def test_a_tool_without_input_schema_gets_an_empty_object() -> None:
    tools = [
        {"name": "now"},
        {"name": "x", "input_schema": {}},
        {"type": "bash_20250124", "name": "bash"},  # a server tool: no schema of its own
        {"name": "ok", "input_schema": {"type": "object", "properties": {"a": {}}}},
    ]
    tr = repaired(tools=tools)
    empty = {"type": "object", "properties": {}}
    assert [t.get("input_schema") for t in tr.body["tools"]] == [
        empty,
        empty,
        None,
        tools[3]["input_schema"],
    ]
    assert kinds(tr) == ["tool_schema", "tool_schema"]


def test_a_history_that_needs_nothing_goes_byte_for_byte() -> None:
    body = request(assistant(tool_use("toolu_a", "Bash", LS)), results("toolu_a"))
    raw = b" " + orjson.dumps(body)
    exchange = AnthropicExchange(orjson.loads(raw), raw, RouteRules(dialect="passthrough"))
    assert exchange.upstream_request == raw
    assert exchange.report()[0] == []


def test_repairs_are_prefix_stable_and_deterministic() -> None:
    history = [
        assistant(tool_use("toolu_a", "Bash", LS), tool_use("toolu_b", "Bash", PWD)),
        {
            "role": "user",
            "content": [
                text("note"),
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_ghost", "content": "?"}],
        },
    ]
    first = repaired(*history, dialect="kimi").body["messages"]
    longer = [
        *history,
        assistant(tool_use("toolu_c", "Bash", LS)),
        results("toolu_c"),
        assistant(text("ok")),
    ]
    second = repaired(*longer, dialect="kimi").body["messages"]
    assert orjson.dumps(second[: len(first)]) == orjson.dumps(first)
    assert repaired(*history).body == repaired(*history).body


def test_the_exchange_repairs_and_reports_unless_the_route_says_off() -> None:
    body = request(assistant(tool_use("toolu_a", "Bash", LS)), {"role": "user", "content": "go on"})
    raw = orjson.dumps(body)
    exchange = AnthropicExchange(body, raw, RouteRules())
    assert first_refusal(orjson.loads(exchange.upstream_request)["messages"]) is None
    assert exchange.report()[0] == [DeltaRepaired(kind="missing_result", detail="Bash")]
    off = AnthropicExchange(body, raw, RouteRules(request_repair=False, dialect="passthrough"))
    assert off.upstream_request == raw
