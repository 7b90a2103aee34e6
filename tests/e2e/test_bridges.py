"""SPEC §9 end to end: Responses and Anthropic Messages clients (the real openai and anthropic
SDKs) through the real proxy on loopback, on a route whose upstream speaks only Chat
Completions (the simulator's `kimi-chat-only` profile: its `/responses` and `/messages` answer
404, its tool-call ids restart every response, and it refuses a history whose tool-call turns
lost their `reasoning_content`). Each guarantee has a control straight to the upstream that
fails."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.simulator import SimulatorLog
from tests.e2e.anthropic import sdk as anthropic_sdk
from tests.e2e.conftest import ProxyFactory
from tests.e2e.test_responses import TOOLS, _respond
from tests.servers import ServerThread

CHAT_ONLY = "kimi-chat-only"
FUNCTION_KEYS = ("name", "description", "parameters")
MAX_TURNS = 8


@pytest.fixture(scope="module")
def bridge(make_proxy: ProxyFactory) -> Iterator[ServerThread]:
    with make_proxy(upstream_api="chat_completions") as server:
        yield server


def openai_client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)


def responses_loop(
    api: openai.OpenAI, model: str, *, stream: bool
) -> tuple[str | None, list[str], list[str]]:
    """Codex's loop (`store: false`, the whole history every turn, reasoning items sent back):
    (final text or None, every call_id received, every command run)."""
    history: list[Any] = [{"role": "user", "content": "Do the task."}]
    call_ids: list[str] = []
    executed: list[str] = []
    for _ in range(MAX_TURNS):
        response = _respond(api, stream, model=model, tools=TOOLS, input=history, store=False)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response.output_text, call_ids, executed
        history += [item.model_dump(exclude_none=True) for item in response.output]
        for call in calls:
            call_ids.append(call.call_id)
            executed.append(json.loads(call.arguments)["command"])
            history.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": "done"}
            )
    return None, call_ids, executed


def _upstream_call_ids(body: dict[str, Any]) -> list[str]:
    return [c["id"] for m in body["messages"] for c in m.get("tool_calls") or ()]


# -- Responses (Codex, the Agents SDK) over Chat Completions ---------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_responses_tool_loop_over_a_chat_only_upstream(
    bridge: ServerThread, log: SimulatorLog, stream: bool
) -> None:
    final, call_ids, executed = responses_loop(openai_client(bridge), CHAT_ONLY, stream=stream)
    assert final == "All 3 rounds done."
    assert len(set(call_ids)) == len(call_ids) == 3
    assert executed == [f"echo round-{n}-0" for n in (1, 2, 3)]
    last = log.requests[-1]
    assert "messages" in last and "input" not in last  # the upstream was asked in its API
    assert _upstream_call_ids(last) == [f"functions.run_shell_command:{k}" for k in range(3)]
    assert all(log.kimi_history_ok)
    turns = [m for m in last["messages"] if m.get("tool_calls")]
    assert all(m.get("reasoning_content") for m in turns)  # round-tripped without state


def test_responses_control_straight_to_the_chat_only_upstream_fails(
    simulator: ServerThread,
) -> None:
    with pytest.raises(openai.NotFoundError):
        responses_loop(openai_client(simulator), CHAT_ONLY, stream=True)


@pytest.mark.parametrize("stream", [True, False])
def test_responses_replay_over_the_bridge_runs_once(bridge: ServerThread, stream: bool) -> None:
    final, _, executed = responses_loop(openai_client(bridge), "replay-once", stream=stream)
    assert final == "All 3 rounds done."
    assert len(executed) == len(set(executed)) == 3, executed


def test_responses_replay_loop_over_the_bridge_ends_with_a_final_error(
    bridge: ServerThread,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        responses_loop(openai_client(bridge), "replay-loop", stream=True)
    assert caught.value.code == "tool_call_replay_loop"


def test_responses_stateful_request_is_refused_not_served_without_context(
    bridge: ServerThread, log: SimulatorLog
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(bridge).responses.create(
            model=CHAT_ONLY, input="go on", previous_response_id="resp_123"
        )
    assert "store" in str(caught.value.message)
    assert log.requests == []  # nothing reached the upstream


def test_responses_upstream_error_keeps_its_status_and_message(bridge: ServerThread) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        openai_client(bridge).responses.create(model="fault-429", input="hi")
    assert "Rate limit reached" in str(caught.value.message)


def test_responses_hosted_tool_is_dropped_and_named(bridge: ServerThread) -> None:
    raw = openai_client(bridge).responses.with_raw_response.create(
        model=CHAT_ONLY,
        input="Do the task.",
        tools=[*TOOLS, {"type": "web_search"}],
        store=False,
    )
    assert "web_search" in raw.headers["x-toolcall-proxy-dropped-tools"]
    assert any(item.type == "function_call" for item in raw.parse().output)


# -- Anthropic Messages (Claude Code) over Chat Completions ----------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_anthropic_tool_loop_over_a_chat_only_upstream(
    bridge: ServerThread, log: SimulatorLog, stream: bool
) -> None:
    run = anthropic_sdk.tool_loop(anthropic_sdk.client(bridge.url), CHAT_ONLY, stream=stream)
    assert run.final_text == "All 3 rounds done."
    assert len(set(run.ids)) == len(run.ids) == 3
    assert all(i.startswith("toolu_") for i in run.ids)
    last = log.requests[-1]
    assert _upstream_call_ids(last) == [f"functions.Bash:{k}" for k in range(3)]
    assert all(log.kimi_history_ok)
    assert all(m.get("reasoning_content") for m in last["messages"] if m.get("tool_calls"))


def test_anthropic_control_straight_to_the_chat_only_upstream_fails(
    simulator: ServerThread,
) -> None:
    with pytest.raises(anthropic.NotFoundError):
        anthropic_sdk.tool_loop(anthropic_sdk.client(simulator.url), CHAT_ONLY, stream=True)


def test_anthropic_replay_over_the_bridge_runs_once(bridge: ServerThread) -> None:
    run = anthropic_sdk.tool_loop(anthropic_sdk.client(bridge.url), "replay-once", stream=True)
    assert run.final_text == "All 3 rounds done."
    assert len(run.executed) == len(set(run.executed)) == 3, run.executed


def test_anthropic_upstream_error_in_anthropics_shape(bridge: ServerThread) -> None:
    with pytest.raises(anthropic.RateLimitError) as caught:
        anthropic_sdk.ask(anthropic_sdk.client(bridge.url), "fault-429", [], stream=False)
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "rate_limit_error"
    assert "Rate limit reached" in body["error"]["message"]


def test_anthropic_count_tokens_is_estimated_on_a_bridged_route(bridge: ServerThread) -> None:
    request = {"model": CHAT_ONLY, "messages": [{"role": "user", "content": "x" * 400}]}
    answer = httpx.post(bridge.url + "/v1/messages/count_tokens", json=request, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["x-toolcall-proxy-estimate"] == "1"
    assert answer.json()["input_tokens"] >= 100


def test_anthropic_count_tokens_control_without_a_bridge_is_not_found(
    simulator: ServerThread,
) -> None:
    request = {"model": CHAT_ONLY, "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(simulator.url + "/v1/messages/count_tokens", json=request, timeout=10)
    assert answer.status_code == 404


def test_chat_completions_on_a_bridged_route_is_served_as_always(
    bridge: ServerThread, log: SimulatorLog
) -> None:
    """The bridge is for other clients: a Chat client on the route is repaired as without it."""
    api = openai_client(bridge)
    answer = api.chat.completions.create(
        model=CHAT_ONLY,
        messages=[{"role": "user", "content": "Do the task."}],
        tools=[{"type": "function", "function": {k: TOOLS[0][k] for k in FUNCTION_KEYS}}],
    )
    (call,) = answer.choices[0].message.tool_calls or []
    assert call.id.startswith("call_") and log.requests[-1]["messages"][0]["content"]


def test_the_chat_only_upstream_refuses_a_tool_turn_without_its_reasoning(
    simulator: ServerThread,
) -> None:
    """The control for the reasoning round trip: a history whose tool-call turn lost its
    `reasoning_content` (what a bridge that drops reasoning sends) is refused."""
    call = {"id": "functions.run_shell_command:0", "type": "function"}
    call["function"] = {"name": "run_shell_command", "arguments": '{"command": "ls"}'}
    request: dict[str, Any] = {
        "model": CHAT_ONLY,
        "messages": [
            {"role": "user", "content": "Do the task."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "done"},
        ],
    }
    answer = httpx.post(simulator.url + "/v1/chat/completions", json=request, timeout=10)
    assert answer.status_code == 400
    assert "reasoning_content" in answer.json()["error"]["message"]
    request["messages"][1]["reasoning_content"] = "I will list the files."
    answer = httpx.post(simulator.url + "/v1/chat/completions", json=request, timeout=10)
    assert answer.status_code == 200
