"""SPEC §5 as §8 translates it: replays answered with a `function_call_output`, the follow-up
delivered as one response, and the breaker in the forms Codex and the SDKs treat as final."""

from __future__ import annotations

import orjson
import pytest

from proxy.core.rounds import RouteRules
from tests.responses.helpers import (
    Upstream,
    answered_call,
    calls_of,
    check_grammar,
    parse,
    request,
    run,
)

OLD = '{"command":"ls"}'
NEW = '{"command":"pwd"}'


def _history(model: str = "kimi-k2") -> dict:  # type: ignore[type-arg]
    return request(*answered_call("call_0badf00d_functions.bash:0", OLD), model=model)


@pytest.mark.parametrize(
    ("model", "form"), [("kimi-k2", "upstream id"), ("some-model", "issued id")]
)
def test_replay_is_answered_and_the_follow_up_reads_as_one_response(model: str, form: str) -> None:
    """Kimi's dialect sends the history's call as `functions.bash:0` (SPEC §5's first form);
    passthrough sends the client id, and `functions.bash:0` is the id the upstream first
    issued, decoded from `call_{hex8}_{raw}` without state (the second form)."""
    raw_id = "functions.bash:0"
    usage = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}
    replay = Upstream().created().message("Again.").call(raw_id, OLD).completed(usage)
    usage = {"input_tokens": 20, "output_tokens": 3, "total_tokens": 23}
    fresh = Upstream().created().message("New.").call("functions.bash:1", NEW).completed(usage)
    result = run(_history(model), replay.body(), fresh.body())
    assert result.followups[0].replays[0].form == form
    assert len(result.followups) == 1
    followup = orjson.loads(result.followups[0].body)
    outputs = [i for i in followup["input"] if i.get("type") == "function_call_output"]
    assert outputs[-1]["output"].startswith(
        f'Duplicate tool call id "{raw_id}" was already handled'
    )
    calls = [i for i in followup["input"] if i.get("type") == "function_call"]
    assert len({c["call_id"] for c in calls}) == 2, "the replay's copy goes out under a fresh id"
    assert outputs[-1]["call_id"] == calls[-1]["call_id"]
    if model == "kimi-k2":
        assert [c["call_id"] for c in calls] == ["functions.bash:0", "functions.bash:1"]
    final = check_grammar(result.events)
    assert result.types().count("response.created") == 1
    assert [i["type"] for i in final["output"]] == ["message", "message", "function_call"]
    assert orjson.loads(calls_of(final)[0]["arguments"]) == {"command": "pwd"}
    assert final["usage"]["input_tokens"] == 30 and final["usage"]["total_tokens"] == 35
    assert final["id"] == "resp_up"


def test_replay_next_to_a_fresh_call_is_dropped_without_a_follow_up() -> None:
    upstream = (
        Upstream().created().call("functions.bash:0", OLD).call("functions.bash:1", NEW).completed()
    )
    result = run(_history(), upstream.body())
    assert not result.followups
    final = check_grammar(result.events)
    assert [c["arguments"] for c in calls_of(final)] == [NEW]


def test_same_id_with_new_arguments_is_a_fresh_call() -> None:
    result = run(_history(), Upstream().created().call("functions.bash:0", NEW).completed().body())
    assert not result.followups
    assert len(calls_of(check_grammar(result.events))) == 1


def test_loop_before_any_visible_byte_is_a_plain_error() -> None:
    replay = Upstream().created().call("functions.bash:0", OLD).completed()
    result = run(_history(), replay.body(), replay.body())
    assert result.loop is not None and result.loop.before_first_byte
    assert result.body == b""  # response.created waited and never left
    assert result.loop.error.message.startswith("Tool-call replay loop detected")


def test_loop_after_bytes_is_response_failed_with_invalid_prompt() -> None:
    replay = (
        Upstream().created().message("Running it again.").call("functions.bash:0", OLD).completed()
    )
    result = run(_history(), replay.body(), replay.body())
    assert result.loop is not None and not result.loop.before_first_byte
    tail = result.exchange.stream_error(result.loop.error)
    events = [*result.events, *parse(tail)]
    check_grammar(events, completed=False)
    failed = events[-1]
    assert failed["type"] == "response.failed"
    error = failed["response"]["error"]
    assert error["code"] == "invalid_prompt"
    assert error["message"].startswith("Tool-call replay loop detected")
    assert "tool_call_replay_loop" in error["message"]
    assert failed["response"]["id"] == "resp_up"


def test_more_follow_ups_than_allowed_trip_the_breaker() -> None:
    history = request(
        *answered_call("call_aaaa", OLD),
        *answered_call("call_bbbb", NEW),
        *answered_call("call_cccc", '{"command":"id"}'),
    )
    rounds = [
        Upstream().created().call(cid, args).completed().body()
        for cid, args in [("call_aaaa", OLD), ("call_bbbb", NEW), ("call_cccc", '{"command":"id"}')]
    ]
    result = run(history, *rounds, rules=RouteRules(max_followups=2))
    assert len(result.followups) == 2 and result.loop is not None


def test_guard_off_delivers_the_replay() -> None:
    result = run(
        _history(),
        Upstream().created().call("functions.bash:0", OLD).completed().body(),
        rules=RouteRules(replay_guard=False),
    )
    assert len(calls_of(check_grammar(result.events))) == 1


def test_non_streaming_replay_follow_up_merges_into_one_body() -> None:
    first = {
        "id": "resp_1",
        "object": "response",
        "created_at": 5,
        "model": "m",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Again."}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "functions.bash:0",
                "name": "bash",
                "arguments": OLD,
            },
        ],
        "usage": {"input_tokens": 4, "output_tokens": 1, "total_tokens": 5},
    }
    second = {
        **first,
        "id": "resp_2",
        "output": [
            {
                "type": "function_call",
                "call_id": "functions.bash:1",
                "name": "bash",
                "arguments": {"command": "pwd"},
            },
        ],
    }
    body = {**_history(), "stream": False}
    result = run(body, orjson.dumps(first), orjson.dumps(second), stream=False)
    merged = orjson.loads(result.body)
    assert merged["id"] == "resp_1"
    assert [i["type"] for i in merged["output"]] == ["message", "function_call"]
    call = merged["output"][1]
    assert (
        call["arguments"] == NEW
        and call["id"].startswith("fc_")
        and call["call_id"].startswith("call_")
    )
    assert merged["usage"]["total_tokens"] == 10


def test_non_streaming_loop_is_detected() -> None:
    replay = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "functions.bash:0",
                "name": "bash",
                "arguments": OLD,
            },
        ],
    }
    result = run(
        {**_history(), "stream": False}, orjson.dumps(replay), orjson.dumps(replay), stream=False
    )
    assert result.loop is not None and result.loop.before_first_byte


def test_replay_in_a_conversation_is_answered_under_the_issued_id() -> None:
    """The upstream keeps the round's items in the conversation (the replayed call under the
    id it issued): the follow-up sends only the answer, under that id."""
    body = {**_history(), "conversation": "conv_1"}
    replay = Upstream().created().call("functions.bash:0", OLD).completed()
    result = run(body, replay.body())
    followup = orjson.loads(result.followups[0].body)
    assert followup["conversation"] == "conv_1"
    (answer,) = followup["input"]
    assert answer["type"] == "function_call_output" and answer["call_id"] == "functions.bash:0"
    assert answer["output"].startswith('Duplicate tool call id "functions.bash:0"')
