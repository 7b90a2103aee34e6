"""The anthropic Python SDK through the real proxy on loopback (SPEC §8), each guarantee with
a control straight to the simulator that fails without the proxy."""

from __future__ import annotations

import re
from collections import Counter

import anthropic
import httpx
import pytest

from proxy.simulator import SimulatorLog
from tests.e2e.anthropic.sdk import MAX_TURNS, TOOLS, ask, client, tool_loop
from tests.e2e.conftest import ProxyFactory
from tests.servers import ServerThread

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
MODES = ["create", "stream"]


def _upstream_ids(body: dict) -> list[str]:
    return [
        block["id"]
        for message in body["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_use"
    ]


@pytest.mark.parametrize("mode", MODES)
def test_kimi_ids_reach_the_sdk_valid_and_unique_while_the_upstream_sees_its_own(
    proxy: ServerThread, log: SimulatorLog, mode: str
) -> None:
    run = tool_loop(client(proxy.url), "kimi-k2", stream=mode == "stream")
    assert run.final_text == "All 3 rounds done."
    assert len(run.ids) == 3 and len(set(run.ids)) == 3
    assert all(ANTHROPIC_ID.match(i) and i.startswith("toolu_") for i in run.ids)
    last = log.requests[-1]
    assert _upstream_ids(last) == ["functions.Bash:0", "functions.Bash:1", "functions.Bash:2"]
    assert [
        b["input"] for m in last["messages"][1::2] for b in m["content"] if b["type"] == "tool_use"
    ] == [{"command": f"echo round-{n}-0"} for n in (1, 2, 3)]


def test_control_without_the_proxy_kimi_ids_repeat_and_are_invalid(simulator: ServerThread) -> None:
    run = tool_loop(client(simulator.url), "kimi-k2", stream=True)
    assert run.ids == ["functions.Bash:0"] * 3  # Claude Code drops every repeat: 2 of 3 lost
    assert not ANTHROPIC_ID.match(run.ids[0])


def test_kimi_reads_its_own_ids_back_turn_after_turn(
    proxy: ServerThread, log: SimulatorLog
) -> None:
    """kimi-vllm leaks raw markup when the history's ids are not functions.{name}:{k}."""
    run = tool_loop(client(proxy.url), "kimi-vllm", stream=True)
    assert run.final_text == "All 3 rounds done."
    assert log.kimi_history_ok and all(log.kimi_history_ok)


def test_messages_stream_accumulates_a_whole_message(proxy: ServerThread) -> None:
    sdk = client(proxy.url)
    with sdk.messages.stream(
        model="final-flush",
        max_tokens=64,
        tools=TOOLS,
        messages=[{"role": "user", "content": "go"}],
    ) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    [use] = [b for b in message.content if b.type == "tool_use"]
    assert use.input == {"command": "echo round-1-0"}
    assert message.stop_reason == "tool_use" and message.usage.output_tokens > 0


@pytest.mark.parametrize("model", ["no-index", "no-block-stop", "no-finish"])
@pytest.mark.parametrize("mode", MODES)
def test_translator_quirks_still_make_a_tool_loop_that_runs(
    proxy: ServerThread, model: str, mode: str
) -> None:
    """QUIRKS: whole input in content_block_start, no content_block_stop, end_turn after
    tool_use, no message_stop."""
    run = tool_loop(client(proxy.url), model, stream=mode == "stream")
    assert run.final_text == "All 3 rounds done." and len(run.executed) == 3


@pytest.mark.parametrize("model", ["no-index", "no-finish"])
def test_control_without_the_proxy_the_loop_stops_before_running_the_tool(
    simulator: ServerThread, model: str
) -> None:
    run = tool_loop(client(simulator.url), model, stream=True)
    assert run.executed == []  # end_turn (or no stop_reason) after tool_use: never ran


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", ["kimi-k2/replay-once", "kimi-k2/replay-once-restarted"])
def test_a_replayed_call_runs_once(
    proxy: ServerThread, log: SimulatorLog, model: str, mode: str
) -> None:
    run = tool_loop(client(proxy.url), model, stream=mode == "stream")
    assert run.final_text is not None and run.final_text.endswith("All 3 rounds done.")
    assert max(Counter(run.executed).values()) == 1, run.executed
    answered = [
        block
        for body in log.requests
        for message in body["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result" and block.get("is_error")
    ]
    assert answered and answered[0]["content"].startswith("Duplicate tool call id ")
    for body in log.requests:  # strict upstreams: "tool_use ids must be unique"
        ids = _upstream_ids(body)
        assert len(ids) == len(set(ids)), ids


@pytest.mark.parametrize("model", ["kimi-k2/replay-once", "kimi-k2/replay-once-restarted"])
def test_control_without_the_proxy_the_replayed_call_runs_twice(
    simulator: ServerThread, model: str
) -> None:
    run = tool_loop(client(simulator.url), model, stream=True)
    assert max(Counter(run.executed).values()) == 2


def test_a_replay_loop_ends_the_stream_with_an_error_the_sdk_raises(proxy: ServerThread) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        tool_loop(client(proxy.url), "kimi-k2/replay-loop", stream=True)
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "loop_detected"
    assert body["error"]["message"].startswith("Tool-call replay loop detected")
    assert caught.value.status_code == 200  # in the stream: Claude Code ends the turn on it


def test_a_replay_loop_without_streaming_is_a_422_the_sdk_does_not_retry(
    make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    with make_proxy() as proxy:
        sdk = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=3)
        with pytest.raises(anthropic.UnprocessableEntityError) as caught:
            tool_loop(sdk, "kimi-k2/replay-loop", stream=False)
    assert caught.value.body["error"]["type"] == "loop_detected"  # type: ignore[index]
    # Turn 1, then turn 2's round and the follow-up the model replays again: no retry of
    # the 422 (max_retries=3 would have sent turn 2 three more times).
    assert len(log.requests) == 1 + 2


def test_control_without_the_proxy_a_replay_loop_runs_until_the_agent_gives_up(
    simulator: ServerThread,
) -> None:
    run = tool_loop(client(simulator.url), "kimi-k2/replay-loop", stream=True)
    assert run.final_text is None  # MAX_TURNS reached
    assert max(Counter(run.executed).values()) == MAX_TURNS  # one command, run every turn


def test_count_tokens_and_other_paths_pass_through(proxy: ServerThread, log: SimulatorLog) -> None:
    counted = client(proxy.url).messages.count_tokens(
        model="kimi-k2", messages=[{"role": "user", "content": "hello there"}]
    )
    assert counted.input_tokens > 0
    assert log.paths[-1] == "/v1/messages/count_tokens"


def test_credentials_and_version_are_forwarded(proxy: ServerThread, log: SimulatorLog) -> None:
    """The SDK (2.x) sends its key as `Authorization: Bearer`; Claude Code sends `x-api-key`."""
    sdk = client(proxy.url, default_headers={"x-api-key": "sk-ant-claude-code"})
    ask(sdk, "reference", [{"role": "user", "content": "hi"}], stream=False)
    headers = log.headers[-1]
    assert headers["x-api-key"] == "sk-ant-claude-code"
    assert headers["authorization"] == "Bearer sk-ant-test"
    assert headers["anthropic-version"]


def test_a_route_key_goes_into_x_api_key(
    make_proxy: ProxyFactory, log: SimulatorLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_ROUTE_TEST_KEY", "route-secret")
    with make_proxy(upstream_key_env="ANTHROPIC_ROUTE_TEST_KEY") as proxy:
        sdk = client(proxy.url, default_headers={"x-api-key": "sk-ant-client"})
        ask(sdk, "reference", [{"role": "user", "content": "hi"}], stream=True)
        httpx.post(proxy.url + "/v1/chat/completions", json={"model": "reference", "messages": []})
    messages, chat = log.headers[-2], log.headers[-1]
    assert messages["x-api-key"] == "route-secret" and "authorization" not in messages
    assert chat["authorization"] == "Bearer route-secret" and "x-api-key" not in chat


def test_errors_before_the_first_byte_have_anthropic_shape(proxy: ServerThread) -> None:
    answer = httpx.post(proxy.url + "/v1/messages", content=b"{not json", timeout=10)
    assert answer.status_code == 400
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        client(proxy.url).messages.create(model="kimi", max_tokens=8, messages="nope")  # type: ignore[arg-type]


def test_metrics_carry_the_surface(make_proxy: ProxyFactory) -> None:
    with make_proxy() as proxy:
        tool_loop(client(proxy.url), "kimi-k2", stream=True)
        with pytest.raises(anthropic.APIStatusError):
            tool_loop(client(proxy.url), "kimi-k2/replay-loop", stream=True)
        text = httpx.get(proxy.url + "/metrics", timeout=10).text
    assert re.search(
        r'toolcall_proxy_ids_rewritten_total\{reason="invalid",surface="anthropic_messages"\} [1-9]',
        text,
    )
    assert 'toolcall_proxy_breaker_trips_total{surface="anthropic_messages"} 1.0' in text
    assert re.search(
        r'toolcall_proxy_requests_total\{[^}]*surface="anthropic_messages"[^}]*\} [1-9]', text
    )


@pytest.mark.parametrize("model", ["leak-kimi", "leak-hermes", "leak-glm"])
def test_tool_calls_leaked_into_text_become_tool_use_blocks(
    proxy: ServerThread, model: str
) -> None:
    run = tool_loop(client(proxy.url), model, stream=True)
    assert run.final_text == "All 3 rounds done."
    assert [name for name, _ in run.executed] == ["Bash"] * 3
    assert all(i.startswith("toolu_") for i in run.ids)


def test_control_without_the_proxy_leaked_calls_stay_text(simulator: ServerThread) -> None:
    run = tool_loop(client(simulator.url), "leak-kimi", stream=True)
    assert run.executed == [] and run.final_text and "<|tool_call_begin|>" in run.final_text
