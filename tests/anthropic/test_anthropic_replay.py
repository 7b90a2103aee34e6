"""SPEC §5 as §8 translates it: replays answered with an is_error tool_result and a follow-up
delivered as one message; the breaker in Anthropic's error shape, in-stream when streaming."""

from __future__ import annotations

import orjson
import pytest

from proxy.anthropic.exchange import AnthropicExchange
from proxy.core.errors import UpstreamStreamError
from proxy.core.events import Forward, LoopDetected
from proxy.core.ids import mint_client_id
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import (
    assistant,
    end,
    read,
    request,
    results,
    run,
    run_message,
    start,
    text,
    tool,
    tool_use,
    whole_message,
)

LS = {"command": "ls"}
# Turn 1's call as the client holds it: minted from `functions.Bash:0`.
MINTED = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
HISTORY = (
    assistant({"type": "text", "text": "Looking."}, tool_use(MINTED, "Bash", LS)),
    results(MINTED),
)


def _replay_round(raw_id: str = "functions.Bash:0", *, prose: bool = True) -> bytes:
    head = start("msg_first", 100) + (text(0, "Again.") if prose else b"")
    return head + tool(1 if prose else 0, raw_id, "Bash", LS) + end("tool_use", 7)


FINAL = start("msg_second", 120) + text(0, "All done.") + end("end_turn", 11)


@pytest.mark.parametrize(
    ("model", "raw_id"),
    [
        ("kimi-k2", "functions.Bash:0"),  # the upstream id the history was translated to
        ("glm-4.6", "functions.Bash:0"),  # passthrough: the id first issued (minted's digest)
        ("glm-4.6", MINTED),  # passthrough: the upstream id, which is the client's
    ],
)
def test_a_replay_is_answered_and_the_follow_up_reads_as_one_message(
    model: str, raw_id: str
) -> None:
    got = run(request(*HISTORY, model=model), [_replay_round(raw_id), FINAL])
    [followup] = got.followups
    *_, asked, answered = followup["messages"]
    assert asked["role"] == "assistant"
    assert asked["content"][0] == {"type": "text", "text": "Again."}
    fresh = asked["content"][1]
    assert fresh["type"] == "tool_use" and fresh["input"] == LS  # input stays an object
    sent = [
        b["id"]
        for m in followup["messages"]
        for b in m["content"]
        if isinstance(m["content"], list) and b["type"] == "tool_use"
    ]
    assert len(set(sent)) == len(sent)  # strict upstreams: "tool_use ids must be unique"
    if model == "kimi-k2":
        assert fresh["id"] == "functions.Bash:1"  # the route's dialect
    [result] = answered["content"]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert result["tool_use_id"] == fresh["id"]
    assert result["content"].startswith(f'Duplicate tool call id "{raw_id}" was already handled')
    received = got.read()
    assert received.types().count("message_start") == 1
    assert received.message["id"] == "msg_first"
    assert [b.get("text") for b in received.message["content"]] == ["Again.", "All done."]
    assert received.tools == []
    assert received.message["stop_reason"] == "end_turn"
    assert received.message["usage"]["output_tokens"] == 7 + 11


def test_the_follow_up_indexes_continue_after_the_first_rounds() -> None:
    second = start("m2") + tool(0, "functions.Bash:2", "Bash", {"command": "pwd"}) + end()
    got = run(request(*HISTORY), [_replay_round(), second]).read()
    assert [b["type"] for b in got.message["content"]] == ["text", "tool_use"]
    assert got.message["stop_reason"] == "tool_use"


def test_replay_with_a_fresh_call_drops_only_the_replay() -> None:
    both = (
        start()
        + tool(0, "functions.Bash:0", "Bash", LS)
        + tool(1, "functions.Bash:2", "Bash", {"command": "pwd"})
        + end()
    )
    got = run(request(*HISTORY), [both])
    assert got.followups == []
    assert [t["input"] for t in got.read().tools] == [{"command": "pwd"}]


def test_a_replay_of_the_answered_replay_trips_the_breaker_in_the_stream() -> None:
    again = start("m2") + tool(0, "functions.Bash:1", "Bash", LS) + end()
    got = run(request(*HISTORY), [_replay_round(prose=False), again])
    assert got.loop is not None and got.loop.before_first_byte is False
    received = got.read()
    # Inside a message, after a completed block: Claude Code then ends the turn (without
    # one it re-sends the request without streaming and gets the 422, twice more).
    assert received.types() == [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "error",
    ]
    assert received.message["content"] == [{"type": "text", "text": ""}]
    assert received.error is not None
    error = received.error["error"]
    assert error["type"] == "loop_detected"
    assert error["message"].startswith("Tool-call replay loop detected")
    assert MINTED in error["message"] and "functions.Bash:0" in error["message"]
    assert "message_stop" not in received.types()


def test_the_same_replay_twice_in_one_response_trips_at_once() -> None:
    twice = (
        start()
        + tool(0, "functions.Bash:0", "Bash", LS)
        + tool(1, "functions.Bash:0", "Bash", LS)
        + end()
    )
    got = run(request(*HISTORY), [twice])
    assert got.loop is not None and got.followups == []
    assert got.read().error is not None


def test_more_follow_ups_than_allowed_trip_the_breaker() -> None:
    history = (
        *HISTORY,
        assistant(tool_use("toolu_2_0_abcd0000", "Bash", {"command": "pwd"})),
        results("toolu_2_0_abcd0000"),
    )
    first = start() + tool(0, "functions.Bash:0", "Bash", LS) + end()
    second = start() + tool(0, "functions.Bash:1", "Bash", {"command": "pwd"}) + end()
    got = run(request(*history), [first, second], RouteRules(max_followups=1))
    assert len(got.followups) == 1 and got.loop is not None
    assert "more than 1 follow-up" in got.read().error["error"]["message"]


def test_a_loop_before_any_upstream_byte_still_comes_after_a_message_start() -> None:
    """SPEC §8: with streaming, always an in-stream error after the head and message_start."""
    got = run(request(*HISTORY), [_replay_round(prose=False)], RouteRules(max_followups=0))
    assert got.loop is not None and got.loop.before_first_byte is False
    exchange = got.exchange
    assert exchange is not None
    # A stream_error with no message_start yet sent (a fresh round) carries its own.
    fresh = type(exchange)(request(), b"{}", RouteRules())
    fresh.begin_round(stream=True)
    received = read(fresh.stream_error(got.loop.error))
    assert received.types() == [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "error",
    ]


def test_a_loop_after_a_completed_block_adds_no_block() -> None:
    again = start("m2") + tool(0, "functions.Bash:1", "Bash", LS) + end()
    got = run(request(*HISTORY), [_replay_round(prose=True), again])
    received = got.read()
    assert received.types()[-2:] == ["content_block_stop", "error"]
    assert received.message["content"] == [{"type": "text", "text": "Again."}]


def test_an_upstream_failure_adds_no_block() -> None:
    """Only a loop must be final; a broken upstream may well be retried."""
    fresh = AnthropicExchange(request(), b"{}", RouteRules())
    fresh.begin_round(stream=True)
    received = read(fresh.stream_error(UpstreamStreamError("cut")))
    assert received.types() == ["message_start", "error"]


def test_replay_guard_off_delivers_the_replay() -> None:
    got = run(request(*HISTORY), [_replay_round()], RouteRules(replay_guard=False))
    assert got.followups == [] and len(got.read().tools) == 1


# -- non-streaming --------------------------------------------------------------------------


def _message(msg_id: str, *content: dict, reason: str = "tool_use", tokens: int = 5) -> dict:
    return whole_message(*content, msg_id=msg_id, reason=reason, output_tokens=tokens)


def test_non_streaming_bodies_get_the_same_rules() -> None:
    body = _message(
        "msg_a",
        {"type": "text", "text": "Two greps."},
        {"type": "tool_use", "id": "grep:3", "name": "grep", "input": {"pattern": "a"}},
        {"type": "tool_use", "id": "grep:3", "name": "grep", "input": {"pattern": "a"}},
        {
            "type": "tool_use",
            "id": "functions.Bash:0",
            "name": "Bash",
            "input": '{"command": "ls"}',
        },
        reason="end_turn",
    )
    event, _ = run_message(request(stream=False), [body])
    assert isinstance(event, Forward)
    out = orjson.loads(event.data)
    tools = [b for b in out["content"] if b["type"] == "tool_use"]
    assert len(tools) == 2 and len({t["id"] for t in tools}) == 2
    assert all(t["id"].startswith("toolu_1_") for t in tools)
    assert tools[1]["input"] == {"command": "ls"}  # an input sent as text becomes an object
    assert out["stop_reason"] == "tool_use"


def test_non_streaming_body_that_needs_nothing_is_forwarded_byte_for_byte() -> None:
    body = _message("msg_a", {"type": "text", "text": "hi"}, reason="end_turn")
    event, _ = run_message(request(stream=False), [body])
    assert event.data == orjson.dumps(body)


def test_non_streaming_replay_follow_up_is_merged_into_one_message() -> None:
    replay = _message(
        "msg_a",
        {"type": "tool_use", "id": "functions.Bash:0", "name": "Bash", "input": LS},
        tokens=4,
    )
    final = _message("msg_b", {"type": "text", "text": "Done."}, reason="end_turn", tokens=6)
    event, followups = run_message(request(*HISTORY, stream=False), [replay, final])
    [followup] = followups
    assert followup["messages"][-1]["content"][0]["is_error"] is True
    out = orjson.loads(event.data)
    assert out["id"] == "msg_a" and out["content"] == [{"type": "text", "text": "Done."}]
    assert out["usage"]["output_tokens"] == 10


def test_non_streaming_loop_is_a_422_before_any_byte() -> None:
    replay = _message(
        "msg_a", {"type": "tool_use", "id": "functions.Bash:0", "name": "Bash", "input": LS}
    )
    again = _message(
        "msg_b", {"type": "tool_use", "id": "functions.Bash:1", "name": "Bash", "input": LS}
    )
    event, _ = run_message(request(*HISTORY, stream=False), [replay, again])
    assert isinstance(event, LoopDetected) and event.before_first_byte is True
    assert event.error.status == 422


def test_non_streaming_leaked_markup_becomes_tool_use() -> None:
    markup = '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>'
    body = _message("msg_a", {"type": "text", "text": "Sure. " + markup}, reason="end_turn")
    event, _ = run_message(request(stream=False), [body])
    out = orjson.loads(event.data)
    assert [b["type"] for b in out["content"]] == ["text", "tool_use"]
    assert out["content"][1]["input"] == LS and out["stop_reason"] == "tool_use"
