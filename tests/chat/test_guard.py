"""SPEC §5 at the core's level: replays, the follow-up round, continuations and the breaker,
streaming and not."""

from __future__ import annotations

import copy
import re
from typing import Any

import orjson
import pytest

from proxy.chat.followup import build_followup
from proxy.chat.history import HistoryFacts
from proxy.chat.message import merge_continuation, sanitize_completion
from proxy.chat.stream import Carry, StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.errors import ReplayLoopDetected
from proxy.core.guard import REPLAY_MESSAGE, GuardState, Replay
from proxy.core.notes import CallDropped
from tests.chat.helpers import (
    HEX,
    USER,
    Event,
    Setup,
    assert_well_formed,
    assistant,
    call_summary,
    calls,
    chunk,
    chunks_of,
    content_of,
    feed_reads,
    finish,
    finish_reasons,
    frag,
    hcall,
    header,
    minted,
    parse_sse,
    request,
    role,
    run,
    sse,
    text,
    tool_deltas,
    tool_msg,
    usage_chunk,
)

NATIVE = "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs"
NATIVE2 = "call_Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2"
ARGS = '{"path":"a.py","limit":10}'
SAME_ARGS_REFORMATTED = '{"limit": 10, "path": "a.py"}'
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def answered_history(
    raw_id: str = NATIVE, name: str = "read_file", args: str = ARGS, **kw: Any
) -> dict[str, Any]:
    return request([USER, assistant(hcall(raw_id, name, args)), tool_msg(raw_id, "contents")], **kw)


def replay_stream(raw_id: str = NATIVE, *, content: str = "Let me read it.") -> bytes:
    return sse(
        role(),
        text(content),
        calls(header(0, raw_id, "read_file")),
        calls(frag(0, SAME_ARGS_REFORMATTED[:9])),
        calls(frag(0, SAME_ARGS_REFORMATTED[9:])),
        finish("tool_calls"),
        usage_chunk(),
    )


def round_two(*items: dict[str, Any] | bytes, **kw: Any) -> bytes:
    return sse(*items, **kw)


R2 = {"id": "chatcmpl-2", "created": 2, "model": "m-2"}


# -- a choice whose only calls are replays ----------------------------------------------------


def test_replay_only_choice_reaches_the_client_as_content_only() -> None:
    setup = Setup(body=answered_history())
    result = run(setup.core, replay_stream())
    events = result.events
    assert content_of(events) == "Let me read it."
    assert tool_deltas(events) == []
    assert finish_reasons(events) == []  # the finish chunk is withheld
    assert not any(e.is_done for e in events)  # so is [DONE]
    assert not any(body.get("usage") for body in chunks_of(events))  # and the usage chunk
    followup = result.core.followup
    assert followup is not None
    assert followup.content == "Let me read it."
    assert followup.replays == [Replay(NATIVE, "read_file", SAME_ARGS_REFORMATTED)]
    assert followup.carry.response_id == "chatcmpl-1"
    assert followup.carry.created == 1
    assert followup.carry.model == "m"
    assert followup.carry.usage == USAGE
    assert result.core.error is None
    assert [n.reason for n in result.core.notes if isinstance(n, CallDropped)] == ["replay"]


def test_replay_only_with_usage_glued_to_the_finish_chunk() -> None:
    data = sse(
        text("x"),
        calls(header(0, NATIVE, "read_file", ARGS)),
        finish("tool_calls", usage=USAGE),
    )
    result = run(Setup(body=answered_history()).core, data)
    assert result.core.followup is not None
    assert result.core.followup.carry.usage == USAGE
    assert not any(body.get("usage") for body in chunks_of(result.events))


def test_replay_only_without_finish_or_done_still_asks_for_a_followup() -> None:
    data = sse(calls(header(0, NATIVE, "read_file", ARGS)), done=False)
    result = run(Setup(body=answered_history()).core, data)
    assert result.core.followup is not None
    assert result.events == []


def test_replay_only_without_finish_reason_withholds_the_usage_chunk_too() -> None:
    # Without a finish_reason the round is known to be replay-only only at its end, after
    # the usage chunk arrived: that chunk must not reach the client, its usage is carried.
    data = sse(text("x"), calls(header(0, NATIVE, "read_file", ARGS)), usage_chunk())
    result = run(Setup(body=answered_history()).core, data)
    assert result.core.followup is not None
    assert result.core.followup.carry.usage == USAGE
    assert not any(body.get("usage") for body in chunks_of(result.events))
    assert content_of(result.events) == "x"


def test_usage_chunk_of_a_round_that_could_have_replayed_still_arrives_before_done() -> None:
    data = sse(text("x"), calls(header(0, NATIVE2, "grep", "{}")), usage_chunk())
    result = run(Setup(body=answered_history()).core, data)
    events = result.events
    assert_well_formed(events)
    bodies = chunks_of(events)
    assert bodies[-1]["usage"] == USAGE
    assert bodies[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert events[-1].is_done


def test_comments_after_the_replay_round_ended_are_not_forwarded() -> None:
    data = sse(calls(header(0, NATIVE, "read_file", ARGS)), finish("tool_calls"), b": keep-alive")
    result = run(Setup(body=answered_history()).core, data)
    assert result.events == []


def test_kimi_replay_of_its_own_id() -> None:
    body = answered_history(model="kimi-k2")
    setup = Setup(body=body)
    assert set(setup.translated().facts.answered) == {"functions.read_file:0"}
    result = run(setup.core, replay_stream("functions.read_file:0"))
    assert result.core.followup is not None
    assert result.core.followup.replays[0].raw_id == "functions.read_file:0"


# -- replays beside fresh calls, and what is not a replay ----------------------------------------


def test_replay_and_fresh_call_only_the_fresh_call_is_delivered() -> None:
    data = sse(
        calls(header(0, NATIVE, "read_file")),
        calls(frag(0, ARGS)),
        calls(header(1, NATIVE2, "grep", '{"q":"x"}')),
        finish("tool_calls"),
    )
    result = run(Setup(body=answered_history()).core, data)
    assert_well_formed(result.events)
    assert call_summary(result.events) == [(NATIVE2, "grep", '{"q":"x"}')]
    assert finish_reasons(result.events) == ["tool_calls"]
    assert result.core.followup is None


def test_same_id_different_arguments_is_a_fresh_call_with_a_fresh_id() -> None:
    data = sse(calls(header(0, NATIVE, "read_file", '{"path":"b.py"}')), finish("tool_calls"))
    result = run(Setup(body=answered_history()).core, data)
    assert call_summary(result.events) == [(minted(2, 0), "read_file", '{"path":"b.py"}')]
    assert result.core.followup is None


def test_same_id_same_arguments_other_name_is_not_a_replay() -> None:
    data = sse(calls(header(0, NATIVE, "write_file", ARGS)), finish("tool_calls"))
    result = run(Setup(body=answered_history()).core, data)
    assert call_summary(result.events) == [(minted(2, 0), "write_file", ARGS)]


def test_same_arguments_under_a_new_id_is_delivered() -> None:
    data = sse(calls(header(0, NATIVE2, "read_file", ARGS)), finish("tool_calls"))
    result = run(Setup(body=answered_history()).core, data)
    assert call_summary(result.events) == [(NATIVE2, "read_file", ARGS)]
    assert result.core.followup is None


def test_unanswered_history_call_is_never_a_replay() -> None:
    body = request([USER, assistant(hcall(NATIVE, "read_file", ARGS))])
    data = sse(calls(header(0, NATIVE, "read_file", ARGS)), finish("tool_calls"))
    result = run(Setup(body=body).core, data)
    assert call_summary(result.events) == [(minted(2, 0), "read_file", ARGS)]


def test_guard_off_delivers_replays_as_fresh_calls_with_fresh_ids() -> None:
    result = run(Setup(body=answered_history(), guard=False).core, replay_stream())
    assert_well_formed(result.events)
    assert call_summary(result.events) == [(minted(2, 0), "read_file", SAME_ARGS_REFORMATTED)]
    assert finish_reasons(result.events) == ["tool_calls"]
    assert result.core.followup is None


# -- the breaker -------------------------------------------------------------------------------


def error_of(events: list[Event]) -> dict[str, Any]:
    assert events[-1].is_error
    assert not any(e.is_done for e in events)
    error: dict[str, Any] = events[-1].data["error"]
    return error


def assert_loop_error(error: dict[str, Any], name: str, raw_id: str) -> None:
    # In a stream, the type its agents treat as final (proxy.core.errors.LOOP_EVENT_TYPE)
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "tool_call_replay_loop"
    assert error["param"] is None
    assert error["message"].startswith("Tool-call replay loop detected")
    assert name in error["message"]
    assert raw_id in error["message"]


def test_same_replay_twice_in_one_response_trips_the_breaker() -> None:
    data = sse(
        text("again"),
        calls(header(0, NATIVE, "read_file", ARGS)),
        calls(header(1, NATIVE, "read_file", SAME_ARGS_REFORMATTED)),
        finish("tool_calls"),
        usage_chunk(),
    )
    result = run(Setup(body=answered_history()).core, data)
    assert result.core.error is not None
    assert_well_formed(result.events, ends_with_error=True)
    assert_loop_error(error_of(result.events), "read_file", NATIVE)
    assert result.core.followup is None
    # after the error the core refuses further input
    assert result.core.feed(sse(text("more"))) == []
    assert result.core.end() == []


def test_breaker_in_kimi_dialect_names_the_first_replayed_id() -> None:
    data = sse(
        calls(header(0, "functions.read_file:0", "read_file", ARGS)),
        calls(header(1, "functions.read_file:0", "read_file", ARGS)),
    )
    result = run(Setup(body=answered_history(model="kimi-k2")).core, data)
    assert_loop_error(error_of(result.events), "read_file", "functions.read_file:0")


def test_breaker_applies_with_n_greater_than_one() -> None:
    data = sse(
        calls(header(0, NATIVE, "read_file", ARGS)),
        calls(header(1, NATIVE, "read_file", ARGS)),
    )
    body = answered_history(n=2)
    result = run(Setup(body=body, hex_values=("aaaa", "bbbb")).core, data)
    assert_loop_error(error_of(result.events), "read_file", NATIVE)


# -- build_followup --------------------------------------------------------------------------


def followup_for(body: dict[str, Any], content: str = "Let me read it.", **kw: Any) -> Any:
    setup = Setup(body=body, **kw)
    tr = setup.translated()
    ids = setup.ids()
    core = StreamSanitizer(ids)
    feed_reads(core, [replay_stream(next(iter(tr.facts.answered)), content=content)])
    assert core.followup is not None
    new_body, facts = build_followup(
        tr.body, tr.facts, ids.guard, core.followup.content, core.followup.replays
    )
    return tr, ids, core, new_body, facts


def all_upstream_ids(body: dict[str, Any]) -> list[str]:
    return [
        call["id"]
        for m in body["messages"]
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or ()
    ]


@pytest.mark.parametrize("model", ["gpt-4o", "kimi-k2"])
def test_followup_appends_assistant_message_and_one_answer_per_replay(model: str) -> None:
    tr, ids, core, body, facts = followup_for(answered_history(model=model))
    previous = tr.body["messages"]
    assert body["messages"][: len(previous)] == previous
    assistant_msg, tool_answer = body["messages"][len(previous) :]
    assert assistant_msg["role"] == "assistant"
    assert assistant_msg["content"] == "Let me read it."
    (call,) = assistant_msg["tool_calls"]
    assert call["type"] == "function"
    assert call["function"] == {"name": "read_file", "arguments": SAME_ARGS_REFORMATTED}
    raw = core.followup.replays[0].raw_id
    assert call["id"] != raw  # strict upstreams reject an id repeated in one request
    assert tool_answer["role"] == "tool"
    assert tool_answer["tool_call_id"] == call["id"]
    assert tool_answer["content"].startswith(f'Duplicate tool call id "{raw}" was already handled')
    assert "not executed again" in tool_answer["content"]
    assert "fresh" in tool_answer["content"]
    assert tool_answer["content"] == REPLAY_MESSAGE.format(raw_id=raw, name="read_file")
    ids_in_request = all_upstream_ids(body)
    assert len(set(ids_in_request)) == len(ids_in_request)
    # everything but the messages is the previous request
    assert {k: v for k, v in body.items() if k != "messages"} == {
        k: v for k, v in tr.body.items() if k != "messages"
    }
    assert facts.answered[call["id"]] == tr.facts.answered[raw]
    assert facts.tool_call_count == tr.facts.tool_call_count + 1
    assert facts.turn == tr.facts.turn
    assert ids.guard.followups_done == 1


def test_followup_ids_in_kimi_dialect_continue_the_history_count() -> None:
    msgs = [
        USER,
        assistant(hcall("a", "read_file", ARGS), hcall("b", "grep", "{}")),
        tool_msg("a"),
        tool_msg("b"),
    ]
    facts = Setup(body=request(msgs, model="kimi-k2")).translated().facts
    assert facts.tool_call_count == 2
    guard = GuardState()
    replays = [
        Replay("functions.read_file:0", "read_file", ARGS),
        Replay("functions.grep:1", "grep", "{}"),
    ]
    tr_body = Setup(body=request(msgs, model="kimi-k2")).translated().body
    body, new_facts = build_followup(tr_body, facts, guard, "", replays)
    assert [c["id"] for c in body["messages"][-3]["tool_calls"]] == [
        "functions.read_file:2",
        "functions.grep:3",
    ]
    assert [m["tool_call_id"] for m in body["messages"][-2:]] == [
        "functions.read_file:2",
        "functions.grep:3",
    ]
    # a second round continues from there
    body2, _ = build_followup(body, new_facts, guard, "", [replays[0]])
    assert body2["messages"][-2]["tool_calls"][0]["id"] == "functions.read_file:4"
    ids_in_request = all_upstream_ids(body2)
    assert len(set(ids_in_request)) == len(ids_in_request)


def test_followup_ids_in_alnum9_dialect() -> None:
    _, _, _, body, _ = followup_for(answered_history(), dialect="alnum9")
    fresh = body["messages"][-2]["tool_calls"][0]["id"]
    assert re.fullmatch(r"[A-Za-z0-9]{9}", fresh)
    ids_in_request = all_upstream_ids(body)
    assert len(set(ids_in_request)) == len(ids_in_request)


def test_two_replays_of_different_calls_get_distinct_fresh_ids() -> None:
    facts = HistoryFacts(
        turn=3,
        answered={"x": ("f", "{}"), "y": ("g", "{}")},
        tool_call_count=2,
        dialect="passthrough",
    )
    body, _ = build_followup(
        {"messages": []}, facts, GuardState(), "", [Replay("x", "f", "{}"), Replay("y", "g", "{}")]
    )
    fresh = [c["id"] for c in body["messages"][0]["tool_calls"]]
    assert len(set(fresh)) == 2
    assert not set(fresh) & {"x", "y"}
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,40}", i) for i in fresh)


def test_followup_does_not_mutate_the_previous_request() -> None:
    tr = Setup(body=answered_history()).translated()
    before = copy.deepcopy(tr.body)
    build_followup(tr.body, tr.facts, GuardState(), "c", [Replay(NATIVE, "read_file", ARGS)])
    assert tr.body == before


def test_more_than_max_followups_trips_the_breaker() -> None:
    tr = Setup(body=answered_history()).translated()
    guard = GuardState(max_followups=2)
    replay = Replay(NATIVE, "read_file", ARGS)
    body, facts = build_followup(tr.body, tr.facts, guard, "", [replay])
    body, facts = build_followup(body, facts, guard, "", [replay])
    with pytest.raises(ReplayLoopDetected) as info:
        build_followup(body, facts, guard, "", [replay])
    assert info.value.status == 422
    assert info.value.body()["error"]["type"] == "loop_detected"
    assert info.value.body()["error"]["code"] == "tool_call_replay_loop"


def test_max_followups_zero_allows_none() -> None:
    tr = Setup(body=answered_history()).translated()
    with pytest.raises(ReplayLoopDetected):
        build_followup(tr.body, tr.facts, GuardState(max_followups=0), "", [])


@pytest.mark.parametrize("which", ["original", "synthetic copy"])
def test_replaying_what_the_proxy_answered_trips_the_breaker(which: str) -> None:
    _, ids, core, body, facts = followup_for(answered_history())
    fresh = body["messages"][-2]["tool_calls"][0]["id"]
    raw_id = NATIVE if which == "original" else fresh
    ids2 = ResponseIds(facts, "auto", ids.guard, hex_source=lambda: HEX)
    core2 = StreamSanitizer(ids2, carry=core.followup.carry)
    out = feed_reads(core2, [sse(calls(header(0, raw_id, "read_file", ARGS)), finish())])
    events = parse_sse(out)
    assert core2.error is not None
    assert_loop_error(error_of(events), "read_file", NATIVE)  # names the first replay


# -- the continuation --------------------------------------------------------------------------


def continuation(items: list[dict[str, Any] | bytes], **sse_kw: Any) -> tuple[Any, Any, bytes]:
    _, ids, core, _, facts = followup_for(answered_history())
    data = sse(*items, **sse_kw)

    def factory() -> StreamSanitizer:  # each replay gets its own copy of the round's state
        return StreamSanitizer(
            ResponseIds(facts, "auto", copy.deepcopy(ids.guard), hex_source=lambda: "feed"),
            carry=copy.deepcopy(core.followup.carry),
        )

    return core, run(factory, data), data


def test_continuation_reads_as_the_same_message() -> None:
    _, result, _ = continuation(
        [
            chunk({"role": "assistant", "content": ""}, **R2),
            chunk({"content": "I already have it."}, **R2),
            chunk({}, "stop", **R2),
            {**usage_chunk(3, 4), **R2},
        ]
    )
    events = result.events
    assert_well_formed(events)
    for body in chunks_of(events):
        assert (body["id"], body["created"], body["model"]) == ("chatcmpl-1", 1, "m")
        for ch in body["choices"]:
            assert "role" not in ch["delta"]
    assert content_of(events) == "I already have it."
    (usage,) = [b["usage"] for b in chunks_of(events) if b.get("usage")]
    assert usage == {"prompt_tokens": 13, "completion_tokens": 9, "total_tokens": 22}
    assert finish_reasons(events) == ["stop"]


def test_both_rounds_together_are_one_well_formed_stream() -> None:
    setup = Setup(body=answered_history())
    first = StreamSanitizer(setup.ids())
    out1 = feed_reads(first, [replay_stream()])
    tr = setup.translated()
    assert first.followup is not None
    _, facts = build_followup(
        tr.body, tr.facts, first.ids.guard, first.followup.content, first.followup.replays
    )
    second = StreamSanitizer(
        ResponseIds(facts, "auto", first.ids.guard, hex_source=lambda: "feed"),
        carry=first.followup.carry,
    )
    out2 = feed_reads(
        second,
        [
            sse(
                chunk({"role": "assistant", "content": ""}, **R2),
                chunk({"content": " Now grep."}, **R2),
                calls(header(0, "functions.grep:0", "grep", '{"q":"x"}'), **R2),
                chunk({}, "tool_calls", **R2),
                {**usage_chunk(3, 4), **R2},
            )
        ],
    )
    events = parse_sse(out1 + out2)
    assert_well_formed(events)
    assert content_of(events) == "Let me read it. Now grep."
    assert call_summary(events) == [(minted(2, 0, hex4="feed"), "grep", '{"q":"x"}')]
    assert {b["id"] for b in chunks_of(events)} == {"chatcmpl-1"}
    roles = [ch["delta"].get("role") for b in chunks_of(events) for ch in b["choices"]]
    assert roles.count("assistant") == 1
    (usage,) = [b["usage"] for b in chunks_of(events) if b.get("usage")]
    assert usage["total_tokens"] == 22


def test_continuation_without_its_own_usage_reports_the_first_rounds() -> None:
    _, result, _ = continuation([chunk({"content": "ok"}, **R2), chunk({}, "stop", **R2)])
    events = result.events
    assert_well_formed(events)
    (usage,) = [b for b in chunks_of(events) if b.get("usage")]
    assert usage["usage"] == USAGE
    assert usage["id"] == "chatcmpl-1"
    assert usage["choices"] == []


def test_continuation_with_usage_glued_to_its_last_chunk() -> None:
    _, result, _ = continuation(
        [chunk({"content": "ok"}, **R2), chunk({}, "stop", usage={"total_tokens": 1}, **R2)]
    )
    usages = [b["usage"] for b in chunks_of(result.events) if b.get("usage")]
    assert usages == [{**USAGE, "total_tokens": 16}]


def test_continuation_fresh_call_under_the_synthetic_id_gets_a_fresh_client_id() -> None:
    _, ids, core, body, facts = followup_for(answered_history())
    second = StreamSanitizer(
        ResponseIds(facts, "auto", ids.guard, hex_source=lambda: HEX), carry=core.followup.carry
    )
    fresh_id = body["messages"][-2]["tool_calls"][0]["id"]
    out = feed_reads(
        second,
        [sse(calls(header(0, fresh_id, "read_file", '{"path":"z"}')), finish(), usage_chunk(1, 1))],
    )
    events = parse_sse(out)
    assert_well_formed(events)
    assert call_summary(events) == [(minted(2, 0), "read_file", '{"path":"z"}')]
    (usage,) = [b["usage"] for b in chunks_of(events) if b.get("usage")]
    assert usage == {"prompt_tokens": 11, "completion_tokens": 6, "total_tokens": 17}


def test_continuation_replaying_another_answered_call_asks_for_another_round() -> None:
    msgs = [
        USER,
        assistant(hcall(NATIVE, "read_file", ARGS), hcall(NATIVE2, "grep", '{"q":1}')),
        tool_msg(NATIVE),
        tool_msg(NATIVE2),
    ]
    setup = Setup(body=request(msgs))
    tr = setup.translated()
    guard = GuardState()
    rounds = [
        sse(text("a"), calls(header(0, NATIVE, "read_file", ARGS)), finish(), usage_chunk(1, 1)),
        sse(text("b"), calls(header(0, NATIVE2, "grep", '{"q":1}')), finish(), usage_chunk(2, 2)),
        sse(text("c"), finish("stop"), usage_chunk(4, 4)),
    ]
    body, facts, carry = tr.body, tr.facts, None
    outputs = b""
    for data in rounds:
        core = StreamSanitizer(
            ResponseIds(facts, "auto", guard, hex_source=lambda: HEX), carry=carry
        )
        outputs += feed_reads(core, [data])
        if core.followup is None:
            break
        carry = core.followup.carry
        body, facts = build_followup(
            body, facts, guard, core.followup.content, core.followup.replays
        )
    events = parse_sse(outputs)
    assert_well_formed(events)
    assert content_of(events) == "abc"
    (usage,) = [b["usage"] for b in chunks_of(events) if b.get("usage")]
    assert usage == {"prompt_tokens": 7, "completion_tokens": 7, "total_tokens": 14}
    assert guard.followups_done == 2
    # one round more would have been too many
    with pytest.raises(ReplayLoopDetected):
        build_followup(body, facts, guard, "", [Replay(NATIVE, "read_file", ARGS)])


# -- non-streaming ---------------------------------------------------------------------------


def completion(
    tool_calls: list[dict[str, Any]] | None,
    content: str | None = "Let me read it.",
    finish_reason: str = "tool_calls",
    **top: Any,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": dict(USAGE),
        **top,
    }


def test_message_replay_only_asks_for_a_followup() -> None:
    ids = Setup(body=answered_history()).ids()
    body = completion([hcall(NATIVE, "read_file", SAME_ARGS_REFORMATTED)])
    result = sanitize_completion(body, ids)
    assert result.replays == [Replay(NATIVE, "read_file", SAME_ARGS_REFORMATTED)]
    assert result.content == "Let me read it."
    message = result.body["choices"][0]["message"]
    assert "tool_calls" not in message
    assert result.body["choices"][0]["finish_reason"] == "stop"


def test_message_replay_and_fresh_call() -> None:
    ids = Setup(body=answered_history()).ids()
    body = completion([hcall(NATIVE, "read_file", ARGS), hcall(NATIVE2, "grep", '{"q":1}')])
    result = sanitize_completion(body, ids)
    assert result.replays == []
    (call,) = result.body["choices"][0]["message"]["tool_calls"]
    assert (call["id"], call["function"]["name"]) == (NATIVE2, "grep")
    assert result.body["choices"][0]["finish_reason"] == "tool_calls"


def test_message_same_id_new_arguments_is_fresh() -> None:
    ids = Setup(body=answered_history()).ids()
    result = sanitize_completion(completion([hcall(NATIVE, "read_file", '{"path":"b"}')]), ids)
    (call,) = result.body["choices"][0]["message"]["tool_calls"]
    assert call["id"] == minted(2, 0)


def test_message_same_replay_twice_trips_the_breaker() -> None:
    ids = Setup(body=answered_history()).ids()
    body = completion([hcall(NATIVE, "read_file", ARGS), hcall(NATIVE, "read_file", ARGS)])
    with pytest.raises(ReplayLoopDetected) as info:
        sanitize_completion(body, ids)
    assert info.value.status == 422
    assert info.value.tool_name == "read_file"
    assert info.value.raw_id == NATIVE
    assert info.value.message.startswith("Tool-call replay loop detected")


def test_message_guard_off_delivers_the_replay() -> None:
    ids = Setup(body=answered_history(), guard=False).ids()
    result = sanitize_completion(completion([hcall(NATIVE, "read_file", ARGS)]), ids)
    (call,) = result.body["choices"][0]["message"]["tool_calls"]
    assert call["id"] == minted(2, 0)
    assert result.replays == []


def test_merge_continuation_is_one_message() -> None:
    carry = Carry("chatcmpl-1", 1, "m", dict(USAGE))
    later = completion(None, content="I already have it.", finish_reason="stop")
    later.update(
        id="chatcmpl-2", created=2, model="m-2", usage={"prompt_tokens": 3, "total_tokens": 3}
    )
    merged = merge_continuation(carry, "Let me read it.", later)
    assert (merged["id"], merged["created"], merged["model"]) == ("chatcmpl-1", 1, "m")
    assert merged["choices"][0]["message"]["content"] == "Let me read it.I already have it."
    assert merged["usage"] == {"prompt_tokens": 13, "completion_tokens": 5, "total_tokens": 18}
    orjson.dumps(merged)


def test_merge_continuation_with_null_content_and_no_usage() -> None:
    carry = Carry("chatcmpl-1", 1, "m", None)
    later = completion([hcall("call_x_123456789", "f")], content=None)
    del later["usage"]
    merged = merge_continuation(carry, "before", later)
    assert merged["choices"][0]["message"]["content"] == "before"
    assert "usage" not in merged
