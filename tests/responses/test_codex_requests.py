"""Codex CLI's own requests (recorded, tests/fixtures/codex/README.md) through the Responses
request translation (SPEC §3, §8): the whole history every turn with `store: false`, Kimi's
restarted `call_id`s repeated across turns, `fc_`/`ctc_` item ids, Codex's `fco_`/`ctco_`
output ids, `reasoning` items with `encrypted_content`, a `namespace` tool and a `custom`
tool. The upstream must get one Kimi id per call, numbered across the history, with every
output under its call's new id, and everything else exactly as Codex sent it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.responses.request import offered_tools, translate_request

FIXTURES = Path(__file__).parents[1] / "fixtures" / "codex"
CALLS = ("function_call", "custom_tool_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")


def recorded(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())["body"]
    return body


def calls_and_outputs(items: list[Any]) -> list[tuple[str, str]]:
    return [(i["type"], i["call_id"]) for i in items if i["type"] in CALLS + OUTPUTS]


@pytest.mark.parametrize("session", ["kimi-k2", "gpt-5.5"])
def test_first_request_has_no_calls_and_is_forwarded_unchanged(session: str) -> None:
    body = recorded(f"{session}-request-1")
    assert body["store"] is False and "previous_response_id" not in body
    translated = translate_request(body, "kimi")
    assert not translated.changed
    assert translated.body is body


@pytest.mark.parametrize("session", ["kimi-k2", "gpt-5.5"])
def test_whole_history_gets_one_kimi_id_per_call(session: str) -> None:
    body = recorded(f"{session}-request-4")
    sent = calls_and_outputs(body["input"])
    # What Codex sent: Kimi's restarted ids, the same one on three turns' calls.
    assert [call_id for kind, call_id in sent if kind in CALLS].count(
        "functions.exec_command:0"
    ) == 3
    translated = translate_request(body, "kimi")
    assert translated.changed
    upstream = calls_and_outputs(translated.body["input"])
    call_ids = [call_id for kind, call_id in upstream if kind in CALLS]
    names = [i["name"] for i in body["input"] if i["type"] in CALLS]
    assert call_ids == [f"functions.{name}:{k}" for k, name in enumerate(names)]
    # Each output follows its call: the parallel round's two outputs answer its two calls.
    assert upstream == [
        ("function_call", "functions.exec_command:0"),
        ("function_call_output", "functions.exec_command:0"),
        ("function_call", "functions.exec_command:1"),
        ("function_call_output", "functions.exec_command:1"),
        (upstream[4][0], "functions.exec_command:2"),
        (upstream[5][0], f"functions.{names[3]}:3"),
        (upstream[6][0], "functions.exec_command:2"),
        (upstream[7][0], f"functions.{names[3]}:3"),
    ]


@pytest.mark.parametrize("session", ["kimi-k2", "gpt-5.5"])
def test_everything_but_call_ids_is_kept(session: str) -> None:
    body = recorded(f"{session}-request-4")
    translated = translate_request(body, "kimi").body
    assert {k: v for k, v in translated.items() if k != "input"} == {
        k: v for k, v in body.items() if k != "input"
    }
    assert len(translated["input"]) == len(body["input"])
    for before, after in zip(body["input"], translated["input"], strict=True):
        assert {k: v for k, v in after.items() if k != "call_id"} == {
            k: v for k, v in before.items() if k != "call_id"
        }
    reasoning = [i for i in translated["input"] if i["type"] == "reasoning"]
    assert reasoning and all(i["encrypted_content"].startswith("gAAAA") for i in reasoning)


def test_offered_tools_include_namespace_functions_and_custom_tools() -> None:
    """What gates leaked text calls (SPEC §8): Codex's nested `multi_agent_v1` functions and
    its freeform `apply_patch` count as offered; `web_search` and `tool_search` do not."""
    fallback = offered_tools(recorded("kimi-k2-request-1"))
    assert {"exec_command", "write_stdin", "spawn_agent", "wait_agent"} <= fallback
    assert "multi_agent_v1" not in fallback and "web_search" not in fallback
    known = offered_tools(recorded("gpt-5.5-request-1"))
    assert {"exec_command", "apply_patch"} <= known
