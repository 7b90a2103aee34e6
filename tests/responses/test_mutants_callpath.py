"""SPEC §4, §5, §8, §10: what the mutation audit found unpinned on the Responses call path
(proxy/responses/calls.py, callflow.py, decide.py, carry.py, textcalls.py): arguments that
arrive as an object, begin in the added item or are flushed again after their `.done`; when
a held call is delivered; which fields of a call's later descriptions the client gets; the
ids and the order of calls recovered from a message's text; the shape of a text delta the
proxy writes; a call to the tool of a repeat run the route blocks (answered as §5's
follow-up)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.notes import DeltaRepaired
from tests.responses.helpers import (
    KIMI_MARKUP,
    Upstream,
    answered_call,
    check_grammar,
    event,
    request,
    response_obj,
    run,
)

ARGS_DELTA = "response.function_call_arguments.delta"
ARGS_DONE = "response.function_call_arguments.done"
CUSTOM = "response.custom_tool_call_input"


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def _deltas(events: list[dict[str, Any]]) -> list[str]:
    return [e["delta"] for e in _of(events, ARGS_DELTA)]


def _added(item: dict[str, Any]) -> bytes:
    return event("response.output_item.added", output_index=0, item=item)


def _call(**fields: Any) -> dict[str, Any]:
    item = {"type": "function_call", "id": "fc_up", "call_id": "c1", "name": "bash"}
    return {**item, "arguments": "", "status": "in_progress", **fields}


# -- one call's text (calls.py) ----------------------------------------------------------------


def test_arguments_sent_as_an_object_in_the_done_event_are_its_json_text() -> None:
    # Kills calls.CallItem.add_whole 4 (the object dropped) and 5 (`null` instead).
    up = Upstream().created().raw(_added(_call()))
    up.raw(event(ARGS_DONE, output_index=0, item_id="fc_up", arguments={"a": [1, "x"]}))
    events = run(request(), up.completed().body()).events
    final = check_grammar(events)
    assert orjson.loads("".join(_deltas(events))) == {"a": [1, "x"]}
    assert orjson.loads(final["output"][0]["arguments"]) == {"a": [1, "x"]}


def test_arguments_begun_in_the_added_item_go_on_in_the_deltas() -> None:
    """Arguments in `output_item.added` that deltas do not repeat but continue: the client
    gets them all, once (SPEC §4)."""
    # Kills calls.CallItem.add_delta 9 (a later delta raises) and 10 (a delta that happens
    # to match the text one character in is taken for a repeat and lost).
    up = Upstream().created().raw(_added(_call(arguments='{"a":"')))
    for piece in ("x", '"', "}"):
        up.raw(event(ARGS_DELTA, output_index=0, item_id="fc_up", delta=piece))
    events = run(request(), up.completed().body()).events
    final = check_grammar(events)
    assert "".join(_deltas(events)) == '{"a":"x"}'
    assert final["output"][0]["arguments"] == '{"a":"x"}'


def test_a_delta_that_is_a_whole_json_value_inside_the_arguments_is_kept() -> None:
    # Kills calls.CallItem.add_delta 12: a number between fragments is not a final flush.
    up = Upstream().created().call("c1", '{"n":12345}').completed()
    events = run(request(), up.body()).events
    check_grammar(events)
    assert _deltas(events) == ['{"n":', "12345", "}"]


def test_a_final_flush_of_the_whole_arguments_adds_nothing() -> None:
    # Kills calls.CallItem.add_delta 15 (the flush sent again, `{...}{...}`) and 16 (the
    # flush raises).
    up = Upstream().created().call("c1", '{"command":"ls"}', flush=True).completed()
    events = run(request(), up.body()).events
    final = check_grammar(events)
    assert "".join(_deltas(events)) == '{"command":"ls"}'
    assert final["output"][0]["arguments"] == '{"command":"ls"}'


def test_a_flush_of_the_whole_arguments_after_their_done_event_adds_nothing() -> None:
    # Kills calls.CallItem.add_whole 8 (the flush after `.done` raises), and
    # callflow.RoundCalls._delta 3 (an empty delta after `.done` counted as a repair).
    up = Upstream().created().call("c1", '{"a":1}', item_done=False)
    up.raw(event(ARGS_DELTA, output_index=0, item_id="fc_up", delta='{"a":1}'))
    up.raw(event(ARGS_DELTA, output_index=0, item_id="fc_up", delta=""))
    up.raw(event("response.output_item.done", output_index=0, item=_call(arguments='{"a":1}')))
    result = run(request(), up.completed().body())
    events = result.events
    final = check_grammar(events)
    assert "".join(_deltas(events)) == '{"a":1}'
    assert final["output"][0]["arguments"] == '{"a":1}'
    assert not [n for n in result.exchange.report()[0] if isinstance(n, DeltaRepaired)]


def test_a_delta_after_the_done_event_does_not_change_the_arguments() -> None:
    # A bug the audit found: a fragment after `.done` reached the client after its `.done`,
    # and `output_item.done` and the completed output said `{"a":1}"a":1}`, against both the
    # `.done` and the upstream's own final item (SPEC §8). It is dropped, and said.
    up = Upstream().created().call("c1", '{"a":1}', item_done=False)
    up.raw(event(ARGS_DELTA, output_index=0, item_id="fc_up", delta='"a":1}'))
    up.raw(event("response.output_item.done", output_index=0, item=_call(arguments='{"a":1}')))
    result = run(request(), up.completed().body())
    events = result.events
    final = check_grammar(events)
    kinds = [e["type"] for e in events]
    assert kinds.index(ARGS_DONE) > max(i for i, k in enumerate(kinds) if k == ARGS_DELTA)
    assert "".join(_deltas(events)) == '{"a":1}'
    assert _of(events, "response.output_item.done")[0]["item"]["arguments"] == '{"a":1}'
    assert final["output"][0]["arguments"] == '{"a":1}'
    notes = result.exchange.report()[0]
    repaired = [n.kind for n in notes if isinstance(n, DeltaRepaired)]
    assert repaired == ["arguments_after_done"]


# -- a call's later descriptions (calls.py) ----------------------------------------------------


def test_the_done_item_s_fields_reach_the_client_but_its_empty_ones() -> None:
    """The call's `output_item.done` is its newer description (SPEC §8): a changed field and a
    new one reach the client; an empty value does not blank one the stream gave."""
    # Kills calls.CallItem.update_item 13, 14 (the changed field kept old), 15, 16 (the
    # empty value taken).
    up = Upstream().created().raw(_added(_call(meta="one", note="keep")))
    up.raw(event(ARGS_DONE, output_index=0, item_id="fc_up", arguments="{}"))
    done = _call(arguments="{}", status="completed", meta="two", note="", fresh=5)
    up.raw(event("response.output_item.done", output_index=0, item=done))
    events = run(request(), up.completed().body()).events
    final = check_grammar(events)
    [item_done] = _of(events, "response.output_item.done")
    for item in (item_done["item"], final["output"][0]):
        assert (item["meta"], item["note"], item["fresh"]) == ("two", "keep", 5)


def test_a_final_item_without_a_status_keeps_the_one_of_the_call_s_end() -> None:
    """The upstream's `response.completed` lists the call without `status`: the client's
    final item keeps the status of the call's done stage, not of its added one (SPEC §8)."""
    # Kills calls.CallItem.client_final 2, 3 (the added stage's `in_progress`).
    up = Upstream().created().call("c1")
    listed = _call(arguments='{"command":"ls"}', newer=1)
    del listed["status"]
    up.raw(event("response.completed", response=response_obj("completed", output=[listed])))
    final = check_grammar(run(request(), up.body()).events, exact=False)
    assert (final["output"][0]["status"], final["output"][0]["newer"]) == ("completed", 1)


# -- when a call reaches the client (callflow.py, decide.py) ----------------------------------


def test_a_held_call_is_delivered_at_its_done_event() -> None:
    """A call without a raw id waits for its arguments to be whole (SPEC §4); its `.done`
    says they are, so it goes out then, before a later item, not at the round's end."""
    # Kills calls.CallItem.add_whole 6, 7 (the `.done` leaves the call incomplete) and
    # callflow.RoundCalls.event 10, 11 (it leaves the call open).
    up = Upstream().created().call(None, "", deltas=False, item_done=False)
    events = run(request(), up.message("after").completed().body()).events
    final = check_grammar(events)
    assert [i["type"] for i in final["output"]] == ["function_call", "message"]
    kinds = [e["type"] for e in events]
    assert kinds.index(ARGS_DONE) < kinds.index("response.output_text.delta")


def test_a_call_without_a_raw_id_goes_out_once_its_arguments_are_complete_json() -> None:
    """SPEC §4: without a raw id, a call's header goes out as soon as its arguments form a
    complete JSON value: before a later item, though no `.done` came."""
    # Kills calls.CallItem.add_delta 20-25 (completeness never taken from the deltas of a
    # function call: the call waits for the round's end).
    up = Upstream().created().call(None, '{"a":1}', done=False, item_done=False)
    events = run(request(), up.message("after").completed().body()).events
    final = check_grammar(events)
    assert [i["type"] for i in final["output"]] == ["function_call", "message"]


def test_a_custom_call_s_input_that_reads_as_json_is_not_complete_yet() -> None:
    """A custom tool call's input is free text: one that parses as JSON so far may go on, so
    a call without a raw id still waits for the input's end, and takes the `call_id` its done
    item brings (SPEC §2: kept verbatim) rather than a minted one."""
    # Kills calls.CallItem.add_delta 19, 20 (the input's JSON decides the call at once).
    item = {"type": "custom_tool_call", "id": "ctc_up", "name": "bash", "input": ""}
    up = Upstream().created().raw(_added({**item, "status": "in_progress"}))
    for piece in ("42", " and more"):
        up.raw(event(f"{CUSTOM}.delta", output_index=0, item_id="ctc_up", delta=piece))
    done = {**item, "call_id": "c1", "input": "42 and more", "status": "completed"}
    up.raw(event("response.output_item.done", output_index=0, item=done))
    events = run(request(), up.completed().body()).events
    [added] = _of(events, "response.output_item.added")
    assert added["item"]["call_id"] == "c1"
    assert [e["delta"] for e in _of(events, f"{CUSTOM}.delta")] == ["42 and more"]


def test_a_call_without_arguments_gets_its_last_delta_before_its_done_event() -> None:
    """Arguments that end empty become `{}` (SPEC §4), sent as a delta before the one
    `.done` (SPEC §8's order: deltas, `.done`, `output_item.done`)."""
    # Kills callflow.RoundCalls.advance 27 (the `{}` left for a later advance, after `.done`).
    up = Upstream().created().call("c1", "").completed()
    events = run(request(), up.body()).events
    check_grammar(events)
    assert [(e["type"], e.get("delta")) for e in events if e.get("output_index") == 0] == [
        ("response.output_item.added", None),
        (ARGS_DELTA, "{}"),
        (ARGS_DONE, None),
        ("response.output_item.done", None),
    ]


def test_an_item_after_a_call_takes_the_next_output_index() -> None:
    # Kills callflow.RoundCalls._decide 20 (`next_index = 1`: the item after a call that
    # is not the first one reuses an index).
    up = Upstream().created().message("a").call("c1").message("b").completed()
    events = run(request(), up.body()).events
    final = check_grammar(events)
    assert [i["type"] for i in final["output"]] == ["message", "function_call", "message"]
    assert [e["output_index"] for e in _of(events, "response.output_item.added")] == [0, 1, 2]


def test_an_other_event_of_a_call_names_the_client_s_item_id() -> None:
    """An event of a call's own that the proxy passes on names the item as the client knows
    it (SPEC §8: ids changed as the stream changed them), here a minted one."""
    # Kills callflow.RoundCalls._pass_on 1, 2, 5, 6 (the upstream's item id left in it).
    up = Upstream().created().call("c1", item_id="", item_done=False)
    up.raw(event("response.function_call_arguments.note", output_index=0, item_id="", n=1))
    events = run(request(), up.completed().body()).events
    [added] = _of(events, "response.output_item.added")
    [note] = _of(events, "response.function_call_arguments.note")
    assert added["item"]["id"].startswith("fc_")
    assert note["item_id"] == added["item"]["id"]


def test_a_call_to_a_repeat_run_s_tool_waits_for_its_arguments() -> None:
    """SPEC §10: a call to the tool of a repeat run the route blocks is held (even with its
    raw id known) until its arguments show whether it repeats the run; a fifth identical
    call is then answered by the proxy, never shown to the client."""
    # Kills decide.may_decide 8, 11 (needs_hold without the call's name: sent at once).
    history = [x for k in range(4) for x in answered_call(f"call_r{k}x")]
    up = Upstream().created().call("call_new9", '{"command":"ls"}').completed()
    result = run(request(*history), up.body())
    assert "response.output_item.added" not in result.types()
    [followup] = result.followups
    assert [(r.raw_id, r.form) for r in followup.replays] == [("call_new9", "repeat")]


# -- calls recovered from a message's text (callflow.py) ---------------------------------------


def test_a_recovered_call_ends_before_the_next_item() -> None:
    """A call recovered from a message's text is whole: its events, up to its
    `output_item.done`, go out right after the message, before the next item."""
    # Kills callflow.RoundCalls.recovered 7, 8 (the call left open until the round's end).
    up = Upstream().created().message("Look. " + KIMI_MARKUP).message("after").completed()
    events = run(request(), up.body()).events
    final = check_grammar(events)
    assert [i["type"] for i in final["output"]] == ["message", "function_call", "message"]
    ends = [(e["type"], e["output_index"]) for e in events if e["type"].endswith("item.done")]
    assert ends == [
        ("response.output_item.done", 0),
        ("response.output_item.done", 1),
        ("response.output_item.done", 2),
    ]


def _without_output_index(data: bytes) -> bytes:
    head, _, rest = data.partition(b"data: ")
    parsed = orjson.loads(rest)
    parsed.pop("output_index", None)
    return head + b"data: " + orjson.dumps(parsed) + b"\n\n"


def test_a_recovered_call_does_not_take_the_place_of_a_call_without_an_output_index() -> None:
    """A call whose events carry no `output_index`, then a message whose text holds a call:
    the recovered call is a call of its own, so the upstream's final description of the first
    call (a newer field) still reaches the client (SPEC §8)."""
    # Kills callflow.RoundCalls.recovered 2 (every recovered call keyed None, the key of
    # the call without an output_index).
    up = Upstream().created().call("c1", '{"command":"pwd"}')
    up.events[2:] = [_without_output_index(e) for e in up.events[2:]]
    up.message("Look. " + KIMI_MARKUP)
    listed = _call(arguments='{"command":"pwd"}', status="completed", newer=1)
    up.raw(event("response.completed", response=response_obj("completed", output=[listed])))
    events = run(request(), up.body()).events
    final = check_grammar(events, exact=False)
    first, _, recovered = final["output"]
    assert (first["call_id"], first["newer"]) == ("c1", 1)
    assert orjson.loads(recovered["arguments"]) == {"command": "ls"}


@pytest.mark.parametrize("text_done", [True, False])
def test_text_a_scanner_held_goes_out_in_a_delta_shaped_as_the_upstream_s(
    text_done: bool,
) -> None:
    """Text the scanner held as a possible marker goes out at the part's end (its
    `output_text.done`, or the item's end alone) in a delta the proxy writes: its fields in
    the order of the upstream's own deltas, so every delta of the part reads alike."""
    # Kills textcalls.MessageTextCalls._delta_like 5, 6 and rest 14, 15 (`output_index`
    # left out there and added last, after `delta`).
    up = Upstream().created().message("Hi ", "<|tool", done=text_done)
    if not text_done:
        content = [{"type": "output_text", "text": "Hi <|tool", "annotations": []}]
        item = {"type": "message", "id": "msg_0", "role": "assistant", "content": content}
        up.raw(event("response.output_item.done", output_index=0, item=item))
    events = run(request(), up.completed().body()).events
    check_grammar(events)
    first, held = _of(events, "response.output_text.delta")
    assert (first["delta"], held["delta"]) == ("Hi ", "<|tool")
    assert [k for k in held if k != "logprobs"] == list(first)
