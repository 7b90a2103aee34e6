"""SPEC §11 on Responses: every call item answered right after its run of model items,
outputs with no call kept as marked user text, arguments made parseable, empty schemas filled;
stored conversations left as they are (their calls live upstream).

OpenAI's refusals these rules answer: "No tool output found for function call call_...",
"No tool call found for function call output with call_id call_...", and (a chat template
behind a compatible server) "An assistant message with 'tool_calls' must be followed by tool
messages responding to each 'tool_call_id'"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.core.notes import DeltaRepaired
from proxy.core.request_repair import MISSING_RESULT
from proxy.core.rounds import RouteRules
from proxy.responses.exchange import ResponsesExchange
from proxy.responses.request import translate_request
from tests.responses.helpers import USER, request

FIXTURES = Path(__file__).parents[1] / "fixtures" / "codex"


def call(call_id: str, name: str = "bash", arguments: str = '{"command":"ls"}') -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def output(call_id: str, text: Any = "done") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def repaired(*items: Any, dialect: str = "passthrough", **extra: Any) -> Any:
    return translate_request(request(*items, **extra), dialect, repair=True)


def kinds(translated: Any) -> list[str]:
    return [note.kind for note in translated.repairs]


def shape(items: list[Any]) -> list[str]:
    return [f"{i.get('type')}:{i.get('call_id') or i.get('role')}" for i in items]


def test_an_interrupted_call_gets_a_synthetic_output_after_its_run() -> None:
    tr = repaired(call("call_a"), call("call_b"), output("call_a"), user("stop"))
    items = tr.body["input"]
    assert shape(items)[1:] == [
        "function_call:call_a",
        "function_call:call_b",
        "function_call_output:call_a",
        "function_call_output:call_b",
        "message:user",
    ]
    assert items[4]["output"] == MISSING_RESULT
    assert tr.repairs == [DeltaRepaired(kind="missing_result", detail="bash")]
    assert set(tr.facts.answered) == {"call_a"}  # SPEC §5/§10: the synthetic one is not


def test_a_custom_tool_call_gets_a_custom_output() -> None:
    custom = {"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch", "input": "x"}
    tr = repaired(custom, user("stop"))
    assert tr.body["input"][2] == {
        "type": "custom_tool_call_output",
        "call_id": "call_p",
        "output": MISSING_RESULT,
    }


def test_an_output_after_a_message_moves_up() -> None:
    tr = repaired(call("call_a"), user("wait"), output("call_a"))
    assert shape(tr.body["input"])[1:] == [
        "function_call:call_a",
        "function_call_output:call_a",
        "message:user",
    ]
    assert kinds(tr) == ["result_moved"]


def test_orphan_and_duplicate_outputs_become_user_messages() -> None:
    parts = [{"type": "input_text", "text": "a part"}]
    tr = repaired(
        output("call_gone", "lost"), call("call_a"), output("call_a"), output("call_a", parts)
    )
    items = tr.body["input"]
    assert items[1]["type"] == "message" and items[1]["content"].endswith("lost")
    assert items[4]["role"] == "user" and items[4]["content"][1:] == parts
    assert "bash" in items[4]["content"][0]["text"]
    assert kinds(tr) == ["orphan_result", "duplicate_result"]


def test_arguments_cut_short_are_closed() -> None:
    tr = repaired(call("call_a", arguments='{"command": "ls", "cwd": "/tm'), output("call_a"))
    assert tr.body["input"][1]["arguments"] == '{"command": "ls"}'
    assert kinds(tr) == ["history_arguments"]


def test_a_function_tool_without_parameters_gets_an_empty_object() -> None:
    tools = [
        {"type": "function", "name": "now"},
        {"type": "function", "name": "x", "parameters": {}},
        {"type": "custom", "name": "apply_patch"},
        {"type": "web_search"},
    ]
    tr = repaired(tools=tools)
    empty = {"type": "object", "properties": {}}
    assert [t.get("parameters") for t in tr.body["tools"]] == [empty, empty, None, None]
    assert kinds(tr) == ["tool_schema", "tool_schema"]


def test_a_stored_conversation_keeps_its_pairing() -> None:
    tr = repaired(output("call_abcdef12_xyz"), previous_response_id="resp_1")
    assert shape(tr.body["input"])[1:] == ["function_call_output:xyz"]
    assert tr.repairs == []


def test_prefix_stable_and_deterministic() -> None:
    history = [call("call_a"), call("call_b"), output("call_a"), user("note"), output("call_x")]
    first = repaired(*history, dialect="kimi").body["input"]
    longer = [*history, call("call_c"), output("call_c"), user("more")]
    second = repaired(*longer, dialect="kimi").body["input"]
    assert orjson.dumps(second[: len(first)]) == orjson.dumps(first)


@pytest.mark.parametrize("name", ["kimi-k2-request-4", "gpt-5.5-request-4"])
def test_codexs_recorded_requests_need_no_repair(name: str) -> None:
    body = json.loads((FIXTURES / f"{name}.json").read_text())["body"]
    tr = translate_request(body, "kimi", repair=True)
    assert tr.repairs == []
    assert tr.body == translate_request(body, "kimi").body


def test_the_exchange_reports_and_a_clean_request_goes_byte_for_byte() -> None:
    body = request(call("call_a"), user("stop"))
    exchange = ResponsesExchange(body, orjson.dumps(body), RouteRules(dialect="passthrough"))
    assert exchange.report()[0] == [DeltaRepaired(kind="missing_result", detail="bash")]
    clean = {"model": "m", "input": [USER, call("call_a"), output("call_a")]}
    raw = b"  " + orjson.dumps(clean)
    exchange = ResponsesExchange(clean, raw, RouteRules(dialect="passthrough"))
    assert exchange.upstream_request == raw
    off = ResponsesExchange(body, raw, RouteRules(request_repair=False, dialect="passthrough"))
    assert off.upstream_request == raw and off.report()[0] == []
