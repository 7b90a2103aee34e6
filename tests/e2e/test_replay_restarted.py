"""SPEC §2.2 and §5 end to end: replays under an id from a counter that restarts every response.

Moonshot's hosted API and relays number calls per response, so a replayed call comes back as
`functions.run_shell_command:0` (or `run_shell_command_0`) while the history the proxy sent
said `:1`. The openai SDK agent loop runs through the real proxy against the simulator's
`replay-*-restarted` profiles; the controls run them straight to the simulator.
"""

from __future__ import annotations

from collections import Counter

import httpx
import openai
import orjson
import pytest

from proxy.core.errors import unretried
from proxy.core.ids import mint_client_id
from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
from tests.e2e.test_replay import MODES, agent, synthetic_answers, upstream_ids
from tests.reliability.upstreams import SSE_HEADERS, Script, scripted
from tests.reliability.wire import error_event, reassemble
from tests.servers import ServerThread

ONCE = ["replay-once-restarted", "kimi-k2/replay-once-restarted"]
LOOP = ["replay-loop-restarted", "kimi-k2/replay-loop-restarted"]


def assert_no_repeated_upstream_ids(log: SimulatorLog) -> None:
    for request in log.requests:
        ids = upstream_ids(request)
        assert len(ids) == len(set(ids)), f"an upstream request repeats an id: {ids}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", ONCE)
def test_a_replay_under_the_restarted_id_runs_once(
    proxy: ServerThread, log: SimulatorLog, model: str, mode: str
) -> None:
    run = agent(proxy, model, mode)
    assert run.final_text == "All 3 rounds done."
    counts = Counter(run.calls)
    assert len(run.calls) == 3 and max(counts.values()) == 1, f"a replay was executed: {counts}"
    (request,) = [r for r in log.requests if synthetic_answers(r)]
    # The synthetic answer names the id the model sent: the restarted one.
    restarted = "functions.run_shell_command:0" if "kimi" in model else "run_shell_command_0"
    assert synthetic_answers(request)[0].startswith(f'Duplicate tool call id "{restarted}"')
    assert_no_repeated_upstream_ids(log)


def test_control_without_the_proxy_the_restarted_replay_runs_twice(
    simulator: ServerThread,
) -> None:
    run = agent(simulator, "kimi-k2/replay-once-restarted", "create")
    assert max(Counter(run.calls).values()) == 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", LOOP)
def test_a_replay_loop_under_the_restarted_id_is_a_422(
    proxy: ServerThread, log: SimulatorLog, model: str, mode: str
) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        agent(proxy, model, mode)
    error = caught.value.response.json()["error"]
    assert (error["type"], error["code"]) == ("loop_detected", "tool_call_replay_loop")
    assert error["message"].startswith("Tool-call replay loop detected")
    # It names the id the client knows (minted for round 2) and the one the model sent.
    assert '"call_2_0_' in error["message"]
    restarted = "functions.run_shell_command:0" if "kimi" in model else "run_shell_command_0"
    assert unretried(f'"{restarted}"') in error["message"]
    # Two tool rounds ran; the request that replays costs exactly two upstream rounds: the
    # replay answered, then its replay once more trips the breaker.
    assert len(log.requests) == 2 + 2
    assert_no_repeated_upstream_ids(log)


def test_control_without_the_proxy_the_restarted_loop_runs_every_step(
    simulator: ServerThread,
) -> None:
    run = agent(simulator, "kimi-k2/replay-loop-restarted", "create", max_steps=6)
    assert max(Counter(run.calls).values()) >= 3


def test_streaming_loop_before_any_byte_is_a_plain_422_on_the_wire(proxy: ServerThread) -> None:
    run = agent(proxy, "replay-loop-restarted", "create", max_steps=2)
    assert [m["role"] for m in run.messages].count("tool") == 2
    body = {"model": "replay-loop-restarted", "stream": True, "messages": run.messages}
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body) as response:
        raw = response.read()
        assert response.status_code == 422
        assert response.headers["content-type"].startswith("application/json")
    assert orjson.loads(raw)["error"]["type"] == "loop_detected"


def test_a_loop_after_content_ends_the_stream_with_an_error_event(
    make_proxy: ProxyFactory,
) -> None:
    # Content reached the client before the loop showed: the head is out, so the loop can only
    # end the stream with an error event (SPEC §5, §6), after that content.
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "kimi-k2"}
    replay = {
        "index": 0,
        "id": "functions.bash:0",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command":"ls"}'},
    }
    events = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {**chunk, "choices": [{"index": 0, "delta": {"content": "Once more."}}]},
        # The same replay twice in one response trips the breaker at once.
        {**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [replay]}}]},
        {**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [{**replay, "index": 1}]}}]},
    ]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    script = Script(headers=SSE_HEADERS, pieces=(body, b"data: [DONE]\n\n"))
    client_id = mint_client_id(1, 0, "abcd", "functions.bash:0")
    history = [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": None, "tool_calls": [{**replay, "id": client_id}]},
        {"role": "tool", "tool_call_id": client_id, "content": "a b c"},
    ]
    request = {"model": "kimi-k2", "stream": True, "messages": history}
    with (
        scripted({"/v1/chat/completions": script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as server,
        httpx.stream("POST", server.url + "/v1/chat/completions", json=request) as response,
    ):
        raw = response.read()
        assert response.status_code == 200
    assert reassemble(raw)["content"] == "Once more."
    error = error_event(raw)
    # In-stream, the type qwen-code treats as final (proxy.core.errors.LOOP_EVENT_TYPE).
    assert (
        error["type"] == "invalid_request_error" and unretried(f'"{client_id}"') in error["message"]
    )
    assert error["code"] == "tool_call_replay_loop"
