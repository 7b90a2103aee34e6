"""SPEC §11 end to end on Anthropic Messages and OpenAI Responses: a session whose history
holds a call the user interrupted (no result), and one whose result's call was compacted away.
Straight to a strict upstream (the simulator's `strict=1`, in each provider's own words) the
anthropic SDK and the openai SDK's `responses.create` are refused with a 400, as every later
request of the session would be; through the real proxy on loopback the same request is
repaired and answered, on the client's own API and over a bridge to Chat Completions (whose
strict upstream is refused in OpenAI's words without the repair)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from proxy.simulator import SimulatorLog
from proxy.simulator.anthropic import unpaired
from tests.e2e.anthropic import sdk as anthropic_sdk
from tests.e2e.conftest import ProxyFactory
from tests.servers import ServerThread

MODEL = "reference+rounds=1+strict=1"


@pytest.fixture(scope="module")
def bridge(make_proxy: ProxyFactory) -> Iterator[ServerThread]:
    with make_proxy(upstream_api="chat_completions") as server:
        yield server


# -- Anthropic Messages ------------------------------------------------------------------------


def tool_use(use_id: str, command: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": "Bash", "input": {"command": command}}


def tool_result(use_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": text}


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


INTERRUPTED: list[Any] = [
    {"role": "user", "content": "list the files, then show the log"},
    {"role": "assistant", "content": [tool_use("toolu_ls01", "ls")]},
    {"role": "user", "content": [tool_result("toolu_ls01", "a.py b.py")]},
    {"role": "assistant", "content": [tool_use("toolu_tail01", "tail -f x.log")]},
    # the user pressed Esc while tail ran: no tool_result for toolu_tail01
    {"role": "user", "content": [text("stop that, just say hi")]},
]
COMPACTED: list[Any] = [
    {"role": "user", "content": "what did the build say?"},
    {"role": "assistant", "content": [text("Let me look.")]},
    # the tool_use this answers was compacted away
    {"role": "user", "content": [tool_result("toolu_gone01", "build ok"), text("so?")]},
]
ANTHROPIC_REFUSALS = [
    (
        INTERRUPTED,
        "messages.3: `tool_use` ids were found without `tool_result` blocks immediately "
        "after: toolu_tail01. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message.",
    ),
    (
        COMPACTED,
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_gone01. Each `tool_result` block must have a corresponding `tool_use` block in "
        "the previous message.",
    ),
]


def _anthropic_ask(server: ServerThread, history: list[Any], *, stream: bool) -> Any:
    return anthropic_sdk.ask(anthropic_sdk.client(server.url), MODEL, history, stream=stream)


@pytest.mark.parametrize(("history", "refusal"), ANTHROPIC_REFUSALS, ids=["missing", "orphan"])
def test_a_strict_anthropic_upstream_refuses_what_the_proxy_repairs(
    simulator: ServerThread,
    proxy: ServerThread,
    log: SimulatorLog,
    history: list[Any],
    refusal: str,
) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        _anthropic_ask(simulator, history, stream=False)
    assert refused.value.status_code == 400
    assert refusal in str(refused.value)

    for stream in (False, True):
        answer = _anthropic_ask(proxy, history, stream=stream)
        assert answer.stop_reason in ("end_turn", "tool_use")
    assert len(log.requests) == 3  # the refused one, then the two the proxy repaired
    assert all(unpaired(body) is None for body in log.requests[1:])


@pytest.mark.parametrize(("history", "refusal"), ANTHROPIC_REFUSALS, ids=["missing", "orphan"])
def test_an_anthropic_client_over_a_strict_chat_upstream_is_answered(
    bridge: ServerThread, log: SimulatorLog, history: list[Any], refusal: str
) -> None:
    for stream in (False, True):
        answer = _anthropic_ask(bridge, history, stream=stream)
        assert answer.stop_reason in ("end_turn", "tool_use")
    assert log.paths[-1].endswith("/chat/completions")
    assert chat_pairs(log.requests[-1]["messages"])


def chat_pairs(messages: list[Any]) -> bool:
    """OpenAI's rule (the strict upstream's): each assistant message's calls are answered by
    the `tool` messages right after it, and every `tool` message answers one of them."""
    awaiting: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] not in awaiting:
                return False
            awaiting.remove(message["tool_call_id"])
            continue
        if awaiting:
            return False
        awaiting = [call["id"] for call in message.get("tool_calls") or ()]
    return not awaiting


# -- OpenAI Responses --------------------------------------------------------------------------

RESPONSES_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


def function_call(call_id: str, command: str) -> dict[str, Any]:
    arguments = '{"command": "' + command + '"}'
    return {"type": "function_call", "call_id": call_id, "name": "bash", "arguments": arguments}


RESPONSES_HISTORY: list[Any] = [
    {"type": "message", "role": "user", "content": "list the files, then show the log"},
    function_call("call_ls01", "ls"),
    {"type": "function_call_output", "call_id": "call_ls01", "output": "a.py b.py"},
    function_call("call_tail01", "tail -f x.log"),
    # the user pressed Esc while tail ran: no function_call_output for call_tail01
    {"type": "message", "role": "user", "content": "stop that, just say hi"},
]
RESPONSES_REFUSAL = "No tool output found for function call call_tail01."


def _respond(server: ServerThread, *, stream: bool) -> Any:
    api = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    request: dict[str, Any] = {
        "model": MODEL,
        "input": RESPONSES_HISTORY,
        "tools": RESPONSES_TOOLS,
        "store": False,
    }
    if not stream:
        return api.responses.create(**request)
    with api.responses.stream(**request) as events:
        for _ in events:
            pass
        return events.get_final_response()


def test_a_strict_responses_upstream_refuses_what_the_proxy_repairs(
    simulator: ServerThread, proxy: ServerThread, log: SimulatorLog
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        _respond(simulator, stream=False)
    assert refused.value.status_code == 400
    assert RESPONSES_REFUSAL in str(refused.value)

    for stream in (False, True):
        answer = _respond(proxy, stream=stream)
        assert answer.status == "completed"
    sent = log.requests[-1]["input"]
    outputs = [i for i in sent if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_ls01", "call_tail01"]
    assert "no result was recorded" in outputs[1]["output"].lower()


def test_a_responses_client_over_a_strict_chat_upstream_is_answered(
    bridge: ServerThread, log: SimulatorLog
) -> None:
    for stream in (False, True):
        answer = _respond(bridge, stream=stream)
        assert answer.status == "completed"
    assert log.paths[-1].endswith("/chat/completions")
    sent = log.requests[-1]["messages"]
    assert chat_pairs(sent)
    assert len([m for m in sent if m["role"] == "tool"]) == 2  # one of them the synthetic
