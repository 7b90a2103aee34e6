"""SPEC §5, §8 on Chat Completions: a replay loop that shows after the stream's first bytes.

The model writes text before each replay (the simulator's `replay-loop-chatty`), so the head and
that text are out when the breaker trips: the stream ends with an error event. Its `type` is
`invalid_request_error`, with the loop's code and message: qwen-code continues a stream cut by
a status-less error whenever the response carried a request id (the proxy's always does), which
re-ran the loop three times, but stops at once on that type; opencode and pi stop on either
(measured in tests/agents/test_chat_loop_error.py). The openai SDK raises on it as on any error
event. Everything else about the loop (the HTTP 422 before the first byte, other errors' events)
is unchanged.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.chat.exchange import ChatExchange
from proxy.core.errors import ReplayLoopDetected, UpstreamStreamError
from proxy.core.rounds import RouteRules
from proxy.simulator import SimulatorLog
from tests.agent import run_agent
from tests.reliability.wire import data_events, error_event, reassemble
from tests.servers import ServerThread

CHATTY = "replay-loop-chatty"
LOOP_TYPE = "invalid_request_error"  # what the agents treat as final
LOOP_CODE = "tool_call_replay_loop"


def _client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)


def _history_after_one_round(server: ServerThread) -> list[dict[str, Any]]:
    """user, assistant (text and a call), tool: the next answer replays that call forever."""
    run = run_agent(_client(server), CHATTY, stream=False, max_steps=1)
    assert [m["role"] for m in run.messages] == ["user", "assistant", "tool"]
    return run.messages


def test_the_stream_ends_with_an_error_event_of_a_type_agents_do_not_retry(
    proxy: ServerThread, log: SimulatorLog
) -> None:
    history = _history_after_one_round(proxy)
    log.clear()
    body = {"model": CHATTY, "stream": True, "messages": history}
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body) as response:
        raw = response.read()
        assert response.status_code == 200
        assert response.headers["x-request-id"]  # why qwen-code would continue a bare error
    # The text of both rounds went out (one message, SPEC §5), the replayed call never did,
    # and the last event is the error.
    assert reassemble(raw)["content"] == "Let me run that." * 2
    assert b"tool_calls" not in raw
    error = error_event(raw)  # the last data event, keys exactly those of SPEC §6, no [DONE]
    assert (error["type"], error["code"], error["param"]) == (LOOP_TYPE, LOOP_CODE, None)
    assert error["message"].startswith("Tool-call replay loop detected")
    assert '"run_shell_command"' in error["message"]
    # A plain data event: no `event:` field, which the openai SDK would read the same way.
    assert raw.endswith(b"data: " + data_events(raw)[-1] + b"\n\n")
    assert b"\nevent:" not in raw and not raw.startswith(b"event:")
    # The request that replays cost two upstream rounds: the replay answered, then its copy.
    assert len(log.requests) == 2


@pytest.mark.parametrize("helper", [False, True], ids=["stream", "stream-helper"])
def test_the_openai_sdk_raises_and_discards_the_partial_message(
    proxy: ServerThread, helper: bool
) -> None:
    with pytest.raises(openai.APIError) as caught:
        run_agent(_client(proxy), CHATTY, stream=True, helper=helper)
    error = caught.value
    assert not isinstance(error, openai.APIStatusError), "an event in a 200 stream"
    assert (error.type, error.code) == (LOOP_TYPE, LOOP_CODE)
    assert error.message.startswith("Tool-call replay loop detected")


def test_without_streaming_the_loop_is_still_the_422_of_spec_5(proxy: ServerThread) -> None:
    history = _history_after_one_round(proxy)
    body = {"model": CHATTY, "messages": history}
    response = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("loop_detected", LOOP_CODE)


def _exchange() -> ChatExchange:
    request = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    return ChatExchange(request, orjson.dumps(request), RouteRules())


def test_the_loop_event_bytes() -> None:
    loop = ReplayLoopDetected("bash", "functions.bash:0", "issued id", client_id="call_1_0_ab")
    event = _exchange().stream_error(loop)
    assert event.startswith(b"data: ") and event.endswith(b"\n\n") and event.count(b"\n") == 2
    error = {"message": loop.message, "type": LOOP_TYPE, "code": LOOP_CODE, "param": None}
    assert orjson.loads(event[len(b"data: ") :]) == {"error": error}


def test_other_errors_keep_their_own_event() -> None:
    """A broken upstream stream is not the loop: its event keeps `upstream_error`, so agents
    may retry it."""
    broken = UpstreamStreamError("the upstream connection broke mid-response")
    assert _exchange().stream_error(broken) == broken.sse_bytes()
    assert orjson.loads(broken.sse_bytes()[6:])["error"]["type"] == "upstream_error"
