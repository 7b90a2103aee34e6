"""SPEC §5 end to end: the replay guard and circuit breaker with the openai SDK agent loop.

Each row of the issue's table is a test; the controls run the same profiles straight to the
simulator (or with the guard off) to show the tests can fail.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.simulator import SimulatorLog
from tests.agent import run_agent
from tests.e2e.conftest import ProxyFactory
from tests.servers import ServerThread

MODES = ["create", "stream", "stream-helper"]


def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)


def agent(server: ServerThread, model: str, mode: str, max_steps: int = 8) -> Any:
    return run_agent(
        client(server),
        model,
        stream=mode != "create",
        helper=mode == "stream-helper",
        max_steps=max_steps,
    )


def upstream_ids(request: dict[str, Any]) -> list[str]:
    return [
        call["id"]
        for m in request["messages"]
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    ]


def synthetic_answers(request: dict[str, Any]) -> list[str]:
    return [
        m["content"]
        for m in request["messages"]
        if m.get("role") == "tool"
        and str(m.get("content", "")).startswith("Duplicate tool call id")
    ]


@pytest.mark.parametrize("mode", MODES)
def test_reused_id_with_new_arguments_executes_every_round(proxy: ServerThread, mode: str) -> None:
    run = agent(proxy, "name-index", mode)
    assert run.final_text == "All 3 rounds done."
    assert len(run.executed) == 6 and len(set(run.calls)) == 6


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", ["replay-once", "kimi-k2/replay-once"])
def test_true_replay_is_answered_by_the_proxy(
    proxy: ServerThread, log: SimulatorLog, model: str, mode: str
) -> None:
    run = agent(proxy, model, mode)
    assert run.final_text == "All 3 rounds done."
    assert len(run.calls) == len(set(run.calls)), f"a replay reached the client: {run.calls}"
    answered = [r for r in log.requests if synthetic_answers(r)]
    assert answered, "the upstream must receive the synthetic tool message"
    text = synthetic_answers(answered[0])[0]
    assert "not executed again" in text and "fresh tool-call id" in text
    for request in log.requests:
        ids = upstream_ids(request)
        assert len(ids) == len(set(ids)), f"an upstream request repeats an id: {ids}"
    if "kimi" in model:
        assert all(i.startswith("functions.") for r in log.requests for i in upstream_ids(r))


@pytest.mark.parametrize("mode", MODES)
def test_replay_loop_stops_visibly(proxy: ServerThread, log: SimulatorLog, mode: str) -> None:
    with pytest.raises(openai.APIError) as caught:
        agent(proxy, "replay-loop", mode)
    assert "Tool-call replay loop detected" in str(caught.value.message)
    assert "run_shell_command" in str(caught.value.message)
    # Streaming too: the looping model sends nothing before its replay (SPEC §5).
    assert isinstance(caught.value, openai.UnprocessableEntityError)
    error = caught.value.response.json()["error"]
    assert error["type"] == "loop_detected" and error["code"] == "tool_call_replay_loop"
    # The first round executes; the request that replays costs exactly 2 upstream requests:
    # its replay is answered once, and the follow-up's answer replays the answered copy, which
    # trips the breaker (SPEC §5) before max_followups (2) would.
    after_first = [r for r in log.requests if upstream_ids(r)]
    assert len(after_first) == 2, len(after_first)


def test_replay_loop_streaming_before_any_byte_is_a_422_on_the_wire(proxy: ServerThread) -> None:
    history = agent_history_after_one_round(proxy)
    body = {"model": "replay-loop", "stream": True, "messages": history}
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body) as response:
        raw = response.read()
        assert response.status_code == 422
        assert response.headers["content-type"].startswith("application/json")
    error = orjson.loads(raw)["error"]
    assert (error["type"], error["code"]) == ("loop_detected", "tool_call_replay_loop")
    assert b"tool_calls" not in raw, "the replayed batch never reaches the client"


def agent_history_after_one_round(server: ServerThread) -> list[dict[str, Any]]:
    """user, assistant(call), tool(result): the history the replay-loop model replays from."""
    run = agent(server, "replay-loop", "create", max_steps=1)
    assert [m["role"] for m in run.messages] == ["user", "assistant", "tool"]
    return list(run.messages)


def test_control_replay_loop_without_proxy_runs_the_command_repeatedly(
    simulator: ServerThread,
) -> None:
    run = agent(simulator, "replay-loop", "create", max_steps=6)
    counts = Counter(run.calls)
    assert max(counts.values()) >= 3, "without the proxy the agent re-executes the replayed call"


@pytest.mark.parametrize("mode", MODES)
def test_replay_beside_fresh_call_only_fresh_call_reaches_client(
    proxy: ServerThread, mode: str
) -> None:
    run = agent(proxy, "replay-mixed", mode)
    assert run.final_text == "All 3 rounds done."
    # Round 2 replays round 1's call beside a fresh one: the fresh one ran, the replay did not.
    assert run.calls == [
        ("run_shell_command", '{"command":"echo round-1-0"}'),
        ("read_file", '{"path":"echo round-2-1"}'),
        ("run_shell_command", '{"command":"echo round-3-0"}'),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_same_id_twice_in_one_response_same_arguments_delivers_one(
    proxy: ServerThread, mode: str
) -> None:
    run = agent(proxy, "dup-in-response", mode)
    assert run.final_text == "All 3 rounds done."
    assert len(run.calls) == len(set(run.calls)) == 3


def test_control_dup_in_response_without_proxy_executes_twice(simulator: ServerThread) -> None:
    run = agent(simulator, "dup-in-response", "create")
    assert len(run.calls) > len(set(run.calls))


@pytest.mark.parametrize("mode", ["create", "stream"])
def test_guard_off_replays_pass_as_fresh_calls(
    make_proxy: ProxyFactory, log: SimulatorLog, mode: str
) -> None:
    with make_proxy(replay_guard=False) as server:
        run = agent(server, "replay-once", mode)
    assert run.final_text == "All 3 rounds done."
    counts = Counter(run.calls)
    assert max(counts.values()) == 2, "the replay reaches the client as a fresh call"
    assert len(run.ids) == len(set(run.ids)), "with fresh ids"
    assert not any(synthetic_answers(r) for r in log.requests)


def test_replay_metrics_and_breaker_are_counted(make_proxy: ProxyFactory) -> None:
    with make_proxy() as server:
        agent(server, "replay-once", "create")
        with pytest.raises(openai.APIError):
            agent(server, "replay-loop", "stream")
        metrics = httpx.get(server.url + "/metrics").text
    # replay-once: one answered; replay-loop: its first replay answered, then the breaker.
    # Labelled with the API surface the client used.
    assert 'toolcall_proxy_replays_answered_total{surface="chat_completions"} 2.0' in metrics
    assert 'toolcall_proxy_breaker_trips_total{surface="chat_completions"} 1.0' in metrics
