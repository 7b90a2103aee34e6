"""SPEC §4, §5, §8: what the mutation audit found unpinned in a Responses round's stream
(proxy/responses/stream.py): the upstream's own failure as the client gets it, a body that
ends inside an event or after an `error`, a call that is only ever done, and a loop found
where the body ends without its completion."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest

from tests.core.full_parse import responses_parsing_every_event as parsing_every_event
from tests.responses.helpers import (
    Upstream,
    answered_call,
    calls_of,
    check_grammar,
    event,
    request,
    response_obj,
    run,
)
from tests.responses.test_runs import (
    client_bytes,
    numbered,
    outcome,
    same_as_parsed,
)

ARGS = '{"command":"ls -la"}'


def test_the_upstream_failure_carries_the_response_the_client_saw() -> None:
    """`response.failed`: the upstream's object with the first round's identity, the status
    `failed` and the items the client received; nothing else is added to the event."""
    error = {"code": "server_error", "message": "boom"}
    failed = event(
        "response.failed",
        response={"id": "resp_other", "status": "in_progress", "error": error},
        sequence_number=5,
    )
    result = run(request(), Upstream().created().message("hi").raw(failed).body())
    last = result.events[-1]
    assert set(last) == {"type", "response", "sequence_number"}
    message_item = result.events[-2]["item"]
    assert result.events[-2]["type"] == "response.output_item.done"
    assert last["response"] == {
        "id": "resp_up",
        "object": "response",
        "created_at": 7,
        "model": "m",
        "status": "failed",
        "error": error,
        "output": [message_item],
    }
    assert result.ended


def test_an_error_event_then_the_end_closes_the_open_message_first() -> None:
    """The upstream's `error` and the body's end: the message it left open still gets its
    `output_item.done` (SPEC §4), after the error, and no completion."""
    error = event("error", code="server_error", message="overloaded", sequence_number=4)
    body = Upstream().created().message("hi", done=False).raw(error).body()
    result = run(request(), body)
    types = result.types()
    assert types[-2:] == ["error", "response.output_item.done"]
    done = result.events[-1]["item"]
    assert done["content"][0]["text"] == "hi" and done["status"] == "completed"
    assert "response.completed" not in types
    assert result.ended


def test_a_last_event_without_its_blank_line_still_counts() -> None:
    """The body ends inside `response.completed` (no blank line): it is the completion."""
    usage = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
    body = Upstream().created().message("hi").completed(usage).body()
    result = run(request(), body[:-2])
    final = check_grammar(result.events)
    assert final["usage"] == usage
    assert final["output"][0]["content"][0]["text"] == "hi"


@pytest.mark.parametrize("cut", [2, 20, 60])
def test_a_body_that_ends_inside_a_text_delta_while_a_lane_is_open(cut: int) -> None:
    """The last delta is cut short by the body's end while the lane is open: it is held for
    a next read that never comes, then read as the parse reads it."""
    texts = ["one ", "two ", "three "]
    body = Upstream().created().message("plain ", done=False).numbered()
    body += b"".join(numbered(texts))
    last = numbered(["four "], start=8)[0]
    reads = [body + last[:-cut]]
    same_as_parsed([reads])
    same_as_parsed([[body, last[:-cut]]])
    result = run(request(), b"".join(reads))
    text = "".join(e["delta"] for e in result.events if e["type"] == "response.output_text.delta")
    # The whole delta counts where only its blank line is missing; a shorter cut is not JSON.
    assert text == ("plain one two three four " if cut == 2 else "plain one two three ")
    check_grammar(result.events)


def test_events_framed_with_cr_lf_after_a_cut_delta_are_read_at_the_end() -> None:
    """A delta whose data line ends with CR LF (a blank `\\r\\n` ends it, no `\\n\\n`
    in the rest of the read) is held as a cut delta with what follows; the body's end reads
    it all: the text and the upstream's completion reach the client."""
    body = Upstream().created().message("plain ", done=False).numbered()
    body += b"".join(numbered(["one ", "two "]))
    mixed = numbered(["three "], start=7)[0].replace(b"}\n\n", b"}\r\n\r\n")
    usage = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
    tail = Upstream(index=1).completed(usage).body().replace(b"\n", b"\r\n")
    with parsing_every_event():
        parsed = outcome([[body + mixed + tail]])
    got = outcome([[body + mixed + tail]])
    # The same bytes, handed out in other pieces (the held events come at the end).
    assert (client_bytes(got), got[1]) == (client_bytes(parsed), parsed[1])
    result = run(request(), body + mixed + tail)
    final = check_grammar(result.events, exact=False)
    assert final["usage"] == usage
    assert final["output"][0]["content"][0]["text"] == "plain one two three "


def test_a_loop_found_where_the_body_ends_without_its_completion() -> None:
    """The replay recurs in a follow-up body that ends without `response.completed`, its
    call without arguments or `.done` events: the call is decided only at the body's end (its
    arguments `{}`, as the history's), and the breaker's error is what the exchange reports
    (SPEC §5)."""
    history = request(*answered_call("call_0badf00d_functions.bash:0", "{}"))
    replay = Upstream().created().message("Again.")
    replay.call("functions.bash:0", "{}", deltas=False, done=False, item_done=False)
    result = run(history, replay.body(), replay.body())
    assert result.loop is not None
    assert result.loop.error.message.startswith("Tool-call replay loop detected")


def _done_only(item: dict[str, Any]) -> bytes:
    return event("response.output_item.done", output_index=0, item=item, sequence_number=3)


@pytest.mark.parametrize(
    ("kind", "key", "value"),
    [("function_call", "arguments", ARGS), ("custom_tool_call", "input", "echo hi")],
)
def test_a_call_sent_only_as_its_done_item_is_a_whole_call(kind: str, key: str, value: str) -> None:
    """A relay that sends a call's `output_item.done` without its `added`: the client gets
    the call's canonical events, its arguments (or input) once."""
    item = {
        "type": kind,
        "id": "fc_up",
        "call_id": "call_abcDEF123",
        "name": "bash",
        key: value,
        "status": "completed",
    }
    body = Upstream().created().raw(_done_only(item)).completed().body()
    result = run(request(), body)
    types = result.types()
    assert types.count("response.output_item.added") == 1
    final = result.events[-1]["response"]
    (call,) = final["output"]
    assert (call["type"], call["call_id"], call[key]) == (kind, "call_abcDEF123", value)
    added = next(e for e in result.events if e["type"] == "response.output_item.added")
    # Its added item is the proxy's: empty, in progress (the done item's status is its end's).
    assert (added["item"][key], added["item"]["status"]) == ("", "in_progress")
    # Both carry the upstream item's fields and no other.
    assert set(added["item"]) == set(call) == set(item)
    if kind == "function_call":
        assert calls_of(check_grammar(result.events))[0]["arguments"] == ARGS


@pytest.mark.parametrize("bad", ["oops", 5, []])
def test_a_message_done_with_an_item_that_is_not_an_object(bad: object) -> None:
    """The upstream's `output_item.done` names no item object: the message is completed as
    it was added, with the text the client got."""
    done = event("response.output_item.done", output_index=0, item=bad, sequence_number=9)
    body = Upstream().created().message("hi ", "there", done=False).raw(done).completed().body()
    final = check_grammar(run(request(), body).events)
    (item,) = final["output"]
    assert (item["id"], item["status"]) == ("msg_0", "completed")
    assert item["content"] == [{"type": "output_text", "text": "hi there", "annotations": []}]


def test_an_incomplete_response_ends_as_incomplete() -> None:
    """The upstream's `response.incomplete` (a token limit): the client's last event is
    `response.incomplete`, its response `incomplete` with the upstream's reason."""
    reason = {"reason": "max_output_tokens"}
    incomplete = event(
        "response.incomplete",
        response=response_obj("incomplete", incomplete_details=reason),
        sequence_number=9,
    )
    body = Upstream().created().message("partial").raw(incomplete).body()
    result = run(request(), body)
    last = result.events[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == reason
    assert "response.completed" not in result.types()
    assert result.ended


def test_the_response_keeps_the_identity_its_first_lifecycle_event_gave() -> None:
    """`response.created` names the response; a later `in_progress` with other values, and
    a follow-up round's lifecycle events, do not rename it (SPEC §5: one response)."""
    history = request(*answered_call("call_0badf00d_functions.bash:0", "{}"))
    first = Upstream().created().message("Again.").call("functions.bash:0", "{}").completed()
    first.events[1] = first.events[1].replace(b'"resp_up"', b'"resp_two"')
    queued = event("response.queued", response=response_obj("queued"), sequence_number=2)
    first.events.insert(2, queued)
    other = Upstream().created().raw(queued).message("New.").completed()
    second = other.body().replace(b'"created_at":7', b'"created_at":8')
    second = second.replace(b'"model":"m"', b'"model":"m2"').replace(b"resp_up", b"resp_3")
    result = run(history, first.body(), second)
    final = result.events[-1]["response"]
    assert (final["id"], final["created_at"], final["model"]) == ("resp_up", 7, "m")
    # The follow-up round's lifecycle events are not the client's.
    lifecycle = ["response.created", "response.in_progress", "response.queued"]
    assert [t for t in result.types() if t in lifecycle] == lifecycle


def test_a_lifecycle_event_without_a_response_object_names_nothing() -> None:
    """`response.created` whose `response` is not an object is passed on; the next one that
    has one names the response."""
    body = Upstream().created().message("hi").completed().body()
    created = body[: body.index(b"event: response.in_progress")]
    odd = event("response.created", response=None, sequence_number=0)
    result = run(request(), body.replace(created, odd))
    assert result.events[0]["response"] is None
    assert result.events[-1]["response"]["id"] == "resp_up"


def test_a_lifecycle_event_after_the_first_item_is_passed_on() -> None:
    """An `in_progress` once the client has bytes goes out at once, renumbered."""
    again = event("response.in_progress", response=response_obj(), sequence_number=1)
    body = Upstream().created().message("hi").raw(again).completed().body()
    result = run(request(), body)
    types = result.types()
    assert types.count("response.in_progress") == 2
    assert types[-2:] == ["response.in_progress", "response.completed"]
    check_grammar(result.events)


def test_an_open_message_ends_as_the_final_output_lists_it() -> None:
    """A message the upstream never finished, listed in its `response.completed` (with a
    field the stream never showed): the client's `output_item.done` is the listed item, as
    is the completed output."""
    listed = {
        "type": "message",
        "id": "msg_0",
        "role": "assistant",
        "status": "completed",
        "phase": "final_answer",
        "content": [{"type": "output_text", "text": "hi", "annotations": []}],
    }
    body = Upstream().created().message("hi", done=False).body()
    completed = event(
        "response.completed", response=response_obj("completed", output=[listed]), sequence_number=9
    )
    result = run(request(), body + completed)
    done = next(e for e in result.events if e["type"] == "response.output_item.done")
    assert done["item"] == listed
    assert result.events[-1]["response"]["output"] == [listed]


@pytest.mark.parametrize("output", [{"a": 1}, "text", 5])
def test_a_final_output_that_is_not_a_list_is_not_read(output: object) -> None:
    """The open message is completed from what the client got."""
    body = Upstream().created().message("hi", done=False).body()
    completed = event(
        "response.completed", response=response_obj("completed", output=output), sequence_number=9
    )
    final = check_grammar(run(request(), body + completed).events)
    assert final["output"][0]["content"][0]["text"] == "hi"


def test_the_completed_response_keeps_the_upstream_s_other_fields() -> None:
    """Fields of the upstream's final response object the proxy has no rule for pass on."""
    completed = event(
        "response.completed",
        response=response_obj("completed", metadata={"k": "v"}, service_tier="flex"),
        sequence_number=9,
    )
    body = Upstream().created().message("hi").raw(completed).body()
    final = check_grammar(run(request(), body).events)
    assert (final["metadata"], final["service_tier"]) == ({"k": "v"}, "flex")


def test_a_done_sentinel_is_not_passed_on_or_counted() -> None:
    """`data: [DONE]` (Chat Completions' end, which some relays add) is not part of the
    Responses grammar: dropped, not counted as a non-JSON line, the body's end completes."""
    body = Upstream().created().message("hi").body() + b"data: [DONE]\n\n"
    result = run(request(), body)
    check_grammar(result.events)
    assert b"DONE" not in result.body
    assert result.exchange.report() == ([], 0)


def test_every_non_json_data_line_is_a_comment_counted_and_noted() -> None:
    """Each such event: its data lines as comments, its `event:` line a comment too, its other
    lines kept; counted one by one, with a `non_json_data` note each."""
    odd = b"event: response.weird\nid: 7\ndata: not json\n\n"
    body = Upstream().created().raw(odd).message("hi").raw(odd).completed().body()
    result = run(request(), body)
    check_grammar(result.events)
    assert result.body.count(b": event: response.weird\nid: 7\n: not json\n\n") == 2
    notes, count = result.exchange.report()
    assert count == 2
    assert [(type(n).__name__, getattr(n, "kind", None)) for n in notes] == [
        ("DeltaRepaired", "non_json_data")
    ] * 2


@pytest.mark.parametrize("data", [b"[1,2]", b"5", b'"text"', b"null"])
def test_json_that_is_not_an_object_becomes_a_comment_in_place(data: bytes) -> None:
    """SPEC §4: JSON that is not an object is not an event either (the SDKs raise on it)."""
    odd = b"event: response.weird\ndata: " + data + b"\n\n"
    body = Upstream().created().message("hi").raw(odd).completed().body()
    result = run(request(), body)
    comment = b": event: response.weird\n: " + data + b"\n\n"
    assert odd not in result.body and comment in result.body
    assert b'"delta":"hi"' in result.body.split(comment)[0]
    assert result.ended and b"event: response.completed" in result.body.split(comment)[1]


def test_deltas_framed_with_cr_lf_are_taken_by_the_lane_without_a_parse() -> None:
    """Runs are looked for only in LF-framed reads; CR LF-framed deltas come through the
    reader, and the open lane takes each from its data (no JSON parse per delta)."""
    words = [f"word{i} " for i in range(60)]
    body = Upstream().created().message(*words).completed().numbered().replace(b"\n", b"\r\n")
    with mock.patch("proxy.core.nonjson.orjson.loads", wraps=orjson.loads) as loads:
        got = outcome([[body]])
    assert loads.call_count <= 12
    with parsing_every_event():
        parsed = outcome([[body]])
    assert (client_bytes(got), got[1]) == (client_bytes(parsed), parsed[1])


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b'event: response.one\ndata: {"type":"response.two","x":1}\n\n', "response.two"),
        (b'event:response.one\ndata: {"x":1}\n\n', "response.one"),
        (b'event: response.\xffone\ndata: {"x":1}\n\n', "response.\ufffdone"),
        (b'data: {"x":1}\n\n', None),
    ],
)
def test_an_unknown_event_s_type_is_its_data_s_else_its_event_line_s(
    raw: bytes, kind: str | None
) -> None:
    """The data's `type` wins; without one, the `event:` line names it (with or without a
    space, any bytes); with neither the event has no type. Passed on, renumbered."""
    body = Upstream().created().message("hi").raw(raw).completed().body()
    result = run(request(), body)
    passed = next(e for e in parse_all(result.body) if e.get("x") == 1)
    assert passed.get("type") == kind
    assert isinstance(passed["sequence_number"], int)
    assert result.ended


def parse_all(data: bytes) -> list[dict[str, Any]]:
    """Every JSON data line the client received (the helpers' `parse` wants a type)."""
    return [orjson.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: {")]


@pytest.mark.parametrize("kind", [["response.x"], {"k": "v"}, 7])
def test_an_event_whose_type_is_not_a_string_is_passed_on(kind: object) -> None:
    odd = b"data: " + orjson.dumps({"type": kind, "x": 1, "sequence_number": 3}) + b"\n\n"
    body = Upstream().created().message("hi").raw(odd).completed().body()
    result = run(request(), body)
    passed = next(e for e in parse_all(result.body) if e.get("x") == 1)
    assert passed["type"] == kind
    assert result.ended


def test_a_call_event_at_an_index_no_call_opened_is_passed_on() -> None:
    """A stray `function_call_arguments.delta` (no call item at its index): not a call's
    event; it is passed on, and the response completes with the message alone."""
    stray = event(
        "response.function_call_arguments.delta",
        item_id="fc_x",
        output_index=5,
        delta="{}",
        sequence_number=3,
    )
    body = Upstream().created().message("hi").raw(stray).completed().body()
    result = run(request(), body)
    assert "response.function_call_arguments.delta" in result.types()
    final = result.events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["message"]
