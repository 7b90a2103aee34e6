"""SPEC §5, §6, §8, §10 on the Responses exchange: what the mutation audit found unpinned in the
round lifecycle (proxy/responses/exchange.py), the follow-up request of a replay-only round
(proxy/responses/followup.py) and `toolcall-proxy sanitize` on a Responses capture
(proxy/responses/offline.py)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import ProxyError, ReplayLoopDetected
from proxy.core.repeat import BLOCK_AT, NOTE_AT
from proxy.core.rounds import RouteRules
from proxy.responses.exchange import ResponsesExchange
from proxy.responses.followup import input_items
from proxy.responses.offline import looks_like_responses, sanitize_responses
from tests.responses.helpers import USER, Upstream, answered_call, entropy, parse, request, run

STOP_AT_ONCE = RouteRules(max_followups=0)  # the first replay is one follow-up too many

ARGS = '{"command":"ls"}'


def _call(call_id: str, **extra: Any) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "bash", "arguments": ARGS} | extra


def _message(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text}]
    return {"type": "message", "id": item_id, "role": "assistant", "content": content}


def _upstream(output: list[Any], **extra: Any) -> bytes:
    return orjson.dumps({"id": "resp_up", "object": "response", "output": output, **extra})


# --- exchange.py: the bytes sent upstream -------------------------------------------------


def _rounds() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for n in range(NOTE_AT):
        items += [
            _call(f"c{n}"),
            {"type": "function_call_output", "call_id": f"c{n}", "output": "x"},
        ]
    return items


def _sent_note(rules: RouteRules) -> bool:
    body = {"model": "m", "input": [USER, *_rounds()]}
    exchange = ResponsesExchange(body, orjson.dumps(body), rules, entropy=entropy)
    return b"[toolcall-proxy] Note" in exchange.upstream_request


def test_the_routes_repeat_guard_and_exempt_globs_reach_the_request() -> None:
    """SPEC §10 (exchange.ResponsesExchange.__init____mutmut_4, _5, _8, _9: the route's mode
    or exempt globs not passed to the translation)."""
    assert _sent_note(RouteRules(repeat_guard="note"))
    assert not _sent_note(RouteRules(repeat_guard="off"))
    assert not _sent_note(RouteRules(repeat_guard="note", repeat_exempt=("ba*",)))


def test_an_unchanged_request_goes_upstream_as_its_own_bytes() -> None:
    """exchange.ResponsesExchange.__init____mutmut_24, _32: no bytes for the upstream."""
    raw = b'{"model": "m", "input": [{"role": "user", "content": "hi"}]}'
    exchange = ResponsesExchange(orjson.loads(raw), raw, RouteRules(), entropy=entropy)
    assert exchange.upstream_request == raw


def test_nothing_is_released_until_an_event_that_shows_something() -> None:
    """SPEC §5's head gate (exchange.ResponsesExchange.__init____mutmut_34: no carry)."""
    body = request()
    exchange = ResponsesExchange(body, orjson.dumps(body), RouteRules(), entropy=entropy)
    exchange.begin_round(stream=True)
    assert exchange.feed(Upstream().created().body()) == []
    assert exchange.nothing_released
    assert exchange.feed(Upstream(index=0).message("hi").body())
    assert not exchange.nothing_released


# --- exchange.py: a non-streamed answer ---------------------------------------------------


def test_a_body_that_is_not_json_is_passed_on_as_it_came() -> None:
    """exchange.ResponsesGrammar.as_it_came__mutmut_1: nothing passed on."""
    result = run(request(stream=False), b"<html>bad gateway</html>", stream=False)
    assert result.body == b"<html>bad gateway</html>"


def test_a_rewritten_body_keeps_every_item_and_its_own_fields() -> None:
    """exchange.ResponsesGrammar.answer__mutmut_23 (every item after the first written at
    index 1), _37 (the upstream's other fields lost), _38, _41 to _47 (the status)."""
    output = [_message("a"), _call("c1", arguments={"command": "ls"}), _message("b", "msg_2")]
    for extra, status in (({"status": "incomplete"}, "incomplete"), ({}, "completed")):
        upstream = _upstream(output, instructions="be brief", **extra)
        answer = orjson.loads(run(request(stream=False), upstream, stream=False).body)
        assert [i["type"] for i in answer["output"]] == ["message", "function_call", "message"]
        assert answer["status"] == status and answer["instructions"] == "be brief"


# --- exchange.py: the event that ends a stream with an error (SPEC §6, §8) ----------------


def _streamed_then(error: ProxyError) -> dict[str, Any]:
    """The `response.failed` a stream ends with after the upstream's created events and a
    message: every event numbered in order, the failure last."""
    body = request()
    exchange = ResponsesExchange(body, orjson.dumps(body), RouteRules(), entropy=entropy)
    exchange.begin_round(stream=True)
    out = exchange.feed(Upstream().created().body())
    out += exchange.feed(Upstream(index=0).message("hi").body())
    data = b"".join(x for x in out if isinstance(x, bytes)) + exchange.stream_error(error)
    events = parse(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.failed"
    return dict(events[-1]["response"])


def test_an_error_ends_the_stream_with_a_failed_response_holding_what_was_sent() -> None:
    """exchange.ResponsesGrammar.stream_error__mutmut_3, _6 to _10, _19 to _28."""
    response = _streamed_then(ProxyError("boom"))
    assert response["status"] == "failed"
    assert [i["content"][0]["text"] for i in response["output"]] == ["hi"]
    assert response["error"] == {"code": "server_error", "message": "boom"}
    coded = _streamed_then(ProxyError("slow", code="upstream_timeout"))
    assert coded["error"] == {"code": "upstream_timeout", "message": "slow"}


def test_an_error_before_anything_was_shown_releases_the_held_events_first() -> None:
    """exchange.ResponsesGrammar.stream_error__mutmut_40 (the held events not released) and
    _42 (the events joined with junk)."""
    body = request()
    exchange = ResponsesExchange(body, orjson.dumps(body), RouteRules(), entropy=entropy)
    exchange.begin_round(stream=True)
    assert exchange.feed(Upstream().created().body()) == []
    error = ReplayLoopDetected("bash", "c1", "replay")
    events = parse(exchange.stream_error(error))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    assert events[-1]["response"]["error"]["code"] == "invalid_prompt"


# --- followup.py: the follow-up request of a replay-only round (SPEC §5) ------------------


def test_a_replayed_custom_tool_call_is_answered_as_a_custom_tool_call() -> None:
    """followup.build_followup__mutmut_41 to _49, _55, _56 and followup._kind__mutmut_1 to
    _10: the replayed call's type, `name` and `input`, and its output's type."""
    history = [
        {"type": "custom_tool_call", "call_id": "ctc_1", "name": "apply_patch", "input": "P"},
        {"type": "custom_tool_call_output", "call_id": "ctc_1", "output": "done"},
    ]
    replay = {"type": "custom_tool_call", "call_id": "ctc_1", "name": "apply_patch", "input": "P"}
    result = run(request(*history, stream=False), _upstream([replay]), stream=False)
    [followup] = result.followups
    call, output = orjson.loads(followup.body)["input"][-2:]
    assert call == {
        "type": "custom_tool_call",
        "call_id": call["call_id"],
        "name": "apply_patch",
        "input": "P",
    }
    assert output["type"] == "custom_tool_call_output"
    assert output["call_id"] == call["call_id"] != "ctc_1"


def test_a_replayed_function_call_is_answered_with_its_arguments() -> None:
    """followup.build_followup__mutmut_42, _48, _49: the call's `arguments` under another
    key."""
    history = [_call("c1"), {"type": "function_call_output", "call_id": "c1", "output": "done"}]
    result = run(request(*history, stream=False), _upstream([_call("c1")]), stream=False)
    [followup] = result.followups
    call, output = orjson.loads(followup.body)["input"][-2:]
    assert call == _call(call["call_id"])
    assert output["type"] == "function_call_output" and output["call_id"] == call["call_id"]


def test_a_string_input_is_one_user_message() -> None:
    """followup.input_items__mutmut_5 to _14. A unit test: a request with a string input
    holds no answered call, so no follow-up of it is built today."""
    assert input_items({"input": "hi"}) == [{"type": "message", "role": "user", "content": "hi"}]
    assert input_items({"input": 3}) == []


# --- offline.py: `toolcall-proxy sanitize` on a Responses capture -------------------------


def test_a_responses_capture_is_told_by_its_request_or_its_first_bytes() -> None:
    """offline.looks_like_responses__mutmut_2, _6, _7 (the request's keys), _10 (the head's
    length) and _11 to _21 (each marker, on its own)."""
    assert looks_like_responses(b"", {"input": []})
    assert not looks_like_responses(b"", {"input": [], "messages": []})
    assert not looks_like_responses(b"", {"model": "m"})
    for marker in (
        b"event: response.created\n",
        b'data: {"type":"response.x"}',
        b'{"object":"response"}',
    ):
        assert looks_like_responses(marker, None)
    assert not looks_like_responses(b'data: {"object":"chat.completion"}', None)
    late = b"event: response."
    assert not looks_like_responses(b" " * (4097 - len(late)) + late, None)
    assert looks_like_responses(b" " * (4096 - len(late)) + late, None)


def _sanitize(
    reads: list[bytes], request_body: dict[str, Any] | None, rules: RouteRules | None = None
) -> tuple[int, bytes, list[str]]:
    """The exit status, what the client would have received, and what was said."""
    out: list[bytes] = []
    said: list[str] = []
    rules = rules or RouteRules()
    code = sanitize_responses(reads, reads[0], request_body, rules, out.append, said.append)
    return code, b"".join(out), said


def test_sanitize_explains_the_translated_history() -> None:
    """exchange.ResponsesExchange.__init____mutmut_33: no translations to explain."""
    history = request(*answered_call("c1"), model="kimi-k2")
    _, _, said = _sanitize([Upstream().created().message("x").completed().body()], history)
    assert said[:2] == [
        "history: call_id 'c1' (bash) -> upstream 'functions.bash:0'",
        "history: call_id 'c1' (function_call_output) -> upstream 'functions.bash:0'",
    ]


def test_sanitize_goes_on_after_a_read_that_decided_a_call() -> None:
    """offline._act__mutmut_6: any forwarded bytes taken as the end of the round."""
    first = Upstream().created().call("functions.bash:0").body()
    rest = Upstream(index=1).message("after").completed().body()
    code, out, _ = _sanitize([first, rest], None)
    assert code == 0
    assert [e["type"] for e in parse(out)][-1] == "response.completed"
    assert parse(out)[-1]["response"]["output"][1]["content"][0]["text"] == "after"


def test_sanitize_explains_a_replay_and_a_repeat() -> None:
    """offline._act__mutmut_9 to _13 (the replay's line) and offline.sanitize_responses__
    mutmut_25, _32 to _37 (said during a read, the round over: the report and status 0)."""
    reply = Upstream().created().call("c9").completed().body()
    code, _, said = _sanitize([reply], request(*answered_call("c9")))
    assert code == 0
    tail = "would be answered by the proxy with a function_call_output and a follow-up request"
    assert said[0] == f"replay: bash call_id 'c9' (matched the upstream id of 'c9') {tail}"
    assert said[-1] == "choice 0: dropped call bash id 'c9' (replay, matched the upstream id)"
    rounds: list[dict[str, Any]] = []
    for n in range(BLOCK_AT):
        rounds += answered_call(f"c{n}")
    code, _, said = _sanitize([reply], request(*rounds))
    assert code == 0
    assert said[0] == f"replay: bash call_id 'c9' (matched the repeat of 'an answered call') {tail}"


def test_sanitize_ends_a_stream_with_the_loop_after_what_was_shown() -> None:
    """SPEC §8: offline._act__mutmut_16 to _21 and offline.sanitize_responses__mutmut_23:
    the stream's failure written, the loop said, status 1."""
    capture = Upstream().created().message("hi").call("c1").completed().body()
    code, out, said = _sanitize([capture], request(*answered_call("c1")), STOP_AT_ONCE)
    assert code == 1
    events = parse(out)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "invalid_prompt"
    assert said[0].startswith("toolcall-proxy sanitize: Tool-call replay loop detected")


def test_sanitize_ends_a_cut_stream_with_the_loop_its_end_found() -> None:
    """offline.sanitize_responses__mutmut_46: the call finished only by the capture's end is
    a replay one round too many; the failure follows what was shown."""
    capture = Upstream().created().message("hi").call("c1", done=False, item_done=False).body()
    code, out, _ = _sanitize([capture], request(*answered_call("c1")), STOP_AT_ONCE)
    assert code == 1
    assert [e["type"] for e in parse(out)][-2:] == [
        "response.output_item.done",
        "response.failed",
    ]


def test_sanitize_writes_nothing_for_a_loop_before_the_first_byte() -> None:
    """offline._act__mutmut_16: the failure written though nothing was shown."""
    capture = Upstream().created().call("c1").completed().body()
    code, out, _ = _sanitize([capture], request(*answered_call("c1")), STOP_AT_ONCE)
    assert (code, out) == (1, b"")


def test_sanitize_reads_a_body_with_leading_whitespace_and_stops_on_its_loop() -> None:
    """offline.sanitize_responses__mutmut_19 (a body after whitespace read as a stream) and
    _44 (a loop found at the body's end exits 0)."""
    body = b"\n  " + _upstream([_message("hi")], status="completed")
    code, out, _ = _sanitize([body], None)
    assert code == 0 and orjson.loads(out)["output"][0]["content"][0]["text"] == "hi"
    replay = b"\n  " + _upstream([_call("c1", name="bash")])
    code, out, said = _sanitize([replay], request(*answered_call("c1")), STOP_AT_ONCE)
    assert (code, out) == (1, b"")
    assert said[0].startswith("toolcall-proxy sanitize: Tool-call replay loop detected")
