"""SPEC §8 "On every surface the proxy changes only what a rule here names", on Responses:

- a call item's `status` and `caller` (and every field no rule names) reach the client as the
  upstream sent them, in `output_item.added`, `output_item.done`, the completed `output` and a
  whole body (program-made calls stay `"in_progress"`, QUIRKS.md);
- `response.completed` lists the items the client saw, each as the upstream's own
  `response.completed` carries it (a newer `encrypted_content` or `fingerprint`), with only the
  ids changed as the stream changed them; items the upstream left out are built from the
  stream, items the proxy dropped stay out. Upstream final items are matched to streamed ones
  by the upstream's `output_index` or item id, never by the client's index (drops shift it).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.rounds import RouteRules
from proxy.responses.ids import decode_call_id
from tests.responses.helpers import (
    KIMI_MARKUP,
    Upstream,
    answered_call,
    calls_of,
    check_grammar,
    event,
    request,
    response_obj,
    run,
)

OLD = '{"command":"ls"}'
NEW = '{"command":"pwd"}'
PROGRAM = {"type": "program", "caller_id": "prog_1"}
USAGE = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}


# -- building upstream streams whose items and final output differ ------------------------------


def call_item(call_id: str | None, arguments: str = NEW, **fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "function_call", "name": "bash", "arguments": arguments}
    if call_id is not None:
        item["call_id"] = call_id
    return {**item, **fields}


def streamed_call(index: int, added: dict[str, Any], done: dict[str, Any]) -> list[bytes]:
    """A call as the upstream streams it: added (empty arguments), deltas, `.done`, item done."""
    ref = {"item_id": added.get("id", ""), "output_index": index}
    arguments = done["arguments"]
    return [
        event(
            "response.output_item.added",
            output_index=index,
            item={**added, "arguments": ""},
            sequence_number=1,
        ),
        event("response.function_call_arguments.delta", **ref, delta=arguments, sequence_number=2),
        event(
            "response.function_call_arguments.done", **ref, arguments=arguments, sequence_number=3
        ),
        event("response.output_item.done", output_index=index, item=done, sequence_number=4),
    ]


def streamed_item(index: int, added: dict[str, Any], done: dict[str, Any]) -> list[bytes]:
    """A non-call item (reasoning, compaction, ...) as added and done, nothing between."""
    return [
        event("response.output_item.added", output_index=index, item=added, sequence_number=1),
        event("response.output_item.done", output_index=index, item=done, sequence_number=2),
    ]


def completed(output: list[dict[str, Any]], kind: str = "response.completed") -> bytes:
    status = "incomplete" if kind == "response.incomplete" else "completed"
    return event(kind, response=response_obj(status, output=output, usage=USAGE), sequence_number=9)


def stream(*events: list[bytes] | bytes) -> bytes:
    head = Upstream().created().body()
    return head + b"".join(e if isinstance(e, bytes) else b"".join(e) for e in events)


def items_by_event(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e["type"] == kind]


def done_items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items of the client's `output_item.done` events, by their output_index."""
    done = [e for e in events if e["type"] == "response.output_item.done"]
    return [e["item"] for e in sorted(done, key=lambda e: e["output_index"])]


def final_response(events: list[dict[str, Any]]) -> dict[str, Any]:
    (final,) = [e for e in events if e["type"] in ("response.completed", "response.incomplete")]
    assert events[-1] is final
    response: dict[str, Any] = final["response"]
    return response


def same_ids(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The completed output lists exactly the streamed items, under the ids the client saw."""
    done = done_items(events)
    output: list[dict[str, Any]] = final_response(events)["output"]
    assert [(i["type"], i.get("id"), i.get("call_id")) for i in output] == [
        (i["type"], i.get("id"), i.get("call_id")) for i in done
    ]
    for mine, streamed in zip(output, done, strict=True):
        if mine["type"] == "function_call":
            assert mine["arguments"] == streamed["arguments"]
    return output


def reasoning(item_id: str, secret: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "encrypted_content": secret,
        **fields,
    }


# -- bug 1: a call's status, caller and other fields as the upstream sent them ------------------


@pytest.mark.parametrize("status", ["in_progress", "incomplete", "completed"])
@pytest.mark.parametrize("split", [None, 5])
def test_program_call_keeps_its_status_and_caller_in_a_stream(
    status: str, split: int | None
) -> None:
    added = call_item("call_abcDEF123", "", id="fc_1", status="in_progress", caller=PROGRAM)
    done = {**added, "arguments": NEW, "status": status, "x_vendor": {"k": 1}}
    body = stream(streamed_call(0, added, done), completed([done]))
    result = run(request(), body, split=split)
    final = check_grammar(result.events)
    (client_added,) = items_by_event(result.events, "response.output_item.added")
    (client_done,) = items_by_event(result.events, "response.output_item.done")
    assert client_added == {**added, "arguments": ""}
    assert client_done == done
    assert calls_of(final) == [done]


def test_rewritten_program_call_keeps_everything_but_its_ids() -> None:
    """A Kimi-style id is rewritten; `status` and `caller` still come through in every event."""
    added = call_item("functions.bash:0", "", id="fc_1", status="in_progress", caller=PROGRAM)
    done = {**added, "arguments": NEW}
    body = stream(streamed_call(0, added, done), completed([done]))
    result = run(request(), body)
    final = check_grammar(result.events)
    (call,) = calls_of(final)
    assert decode_call_id(call["call_id"]) == "functions.bash:0"
    assert {**call, "call_id": "functions.bash:0"} == done
    (client_added,) = items_by_event(result.events, "response.output_item.added")
    assert client_added["status"] == "in_progress" and client_added["caller"] == PROGRAM


def test_held_program_call_keeps_its_status() -> None:
    """A possible replay is held until its item is done, then delivered: its added event still
    carries the upstream's added status, its done item the done one."""
    added = call_item("functions.bash:0", "", id="fc_1", status="in_progress", caller=PROGRAM)
    done = {**added, "arguments": NEW}
    body = stream(streamed_call(0, added, done), completed([done]))
    history = request(*answered_call("call_0badf00d_functions.bash:0", OLD))
    result = run(history, body)
    final = check_grammar(result.events)
    (client_added,) = items_by_event(result.events, "response.output_item.added")
    assert client_added["status"] == "in_progress"
    assert calls_of(final)[0]["status"] == "in_progress"


def test_call_without_a_done_item_is_completed_by_the_proxy() -> None:
    """Framing the proxy must complete: a call the upstream never ended is done, `completed`."""
    added = call_item("call_abcDEF123", "", id="fc_1", status="in_progress", caller=PROGRAM)
    body = stream(streamed_call(0, added, {**added, "arguments": NEW})[:2])
    final = check_grammar(run(request(), body).events)
    (call,) = calls_of(final)
    assert call["status"] == "completed" and call["caller"] == PROGRAM


def test_program_call_keeps_its_status_in_a_whole_body() -> None:
    item = call_item("call_abcDEF123", id="fc_1", status="in_progress", caller=PROGRAM)
    kimi = call_item("functions.bash:0", OLD, id="fc_2", status="in_progress", caller=PROGRAM)
    body = response_obj("completed", output=[item, kimi], usage=USAGE)
    result = run({**request(), "stream": False}, orjson.dumps(body), stream=False)
    first, second = orjson.loads(result.body)["output"]
    assert first == item
    assert decode_call_id(second["call_id"]) == "functions.bash:0"
    assert {**second, "call_id": "functions.bash:0"} == kimi


def _replay_history() -> dict[str, Any]:
    return request(*answered_call("call_0badf00d_functions.bash:0", OLD), model="kimi-k2")


def test_program_call_of_a_follow_up_round_keeps_its_status_in_a_stream() -> None:
    replay = Upstream().created().call("functions.bash:0", OLD).completed().body()
    added = call_item("functions.bash:1", "", id="fc_2", status="in_progress", caller=PROGRAM)
    done = {**added, "arguments": NEW}
    second = stream(streamed_call(0, added, done), completed([done]))
    result = run(_replay_history(), replay, second)
    assert len(result.followups) == 1
    final = check_grammar(result.events)
    (call,) = calls_of(final)
    assert call["status"] == "in_progress" and call["caller"] == PROGRAM
    (client_done,) = items_by_event(result.events, "response.output_item.done")
    assert client_done["status"] == "in_progress"


def test_program_call_of_a_follow_up_round_keeps_its_status_in_a_whole_body() -> None:
    replayed = call_item("functions.bash:0", OLD, id="fc_1", status="completed")
    first = response_obj("completed", output=[replayed], usage=USAGE)
    fresh = call_item("functions.bash:1", id="fc_2", status="in_progress", caller=PROGRAM)
    second = response_obj("completed", output=[fresh], usage=USAGE)
    body = {**_replay_history(), "stream": False}
    result = run(body, orjson.dumps(first), orjson.dumps(second), stream=False)
    assert len(result.followups) == 1
    (call,) = orjson.loads(result.body)["output"]
    assert call["status"] == "in_progress" and call["caller"] == PROGRAM


# -- bug 2: the upstream's final items, under the ids the client saw ----------------------------


def test_completed_output_takes_the_newer_encrypted_content_and_fingerprint() -> None:
    rs_streamed = reasoning("rs_1", "enc-streamed")
    rs_final = reasoning("rs_1", "enc-final", fingerprint="fp-final")
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "cmp-streamed"}
    compaction_final = {**compaction, "encrypted_content": "cmp-final"}
    added = call_item("call_abcDEF123", "", id="fc_1", status="in_progress")
    done = {**added, "arguments": NEW, "status": "completed", "fingerprint": "fp-streamed"}
    call_final = {**done, "fingerprint": "fp-final"}
    body = stream(
        streamed_item(0, rs_streamed, rs_streamed),
        streamed_item(1, compaction, compaction),
        streamed_call(2, added, done),
        completed([rs_final, compaction_final, call_final]),
    )
    for split in (None, 7):
        result = run(request(), body, split=split)
        check_grammar(result.events, exact=False)
        assert same_ids(result.events) == [rs_final, compaction_final, call_final]


def test_final_items_are_matched_past_dropped_calls() -> None:
    """The upstream's duplicate call is dropped, so the client's indexes are one behind the
    upstream's after it: each final item still goes to its own streamed item."""
    first = call_item("call_abcDEF123", OLD, id="fc_a", status="completed")
    duplicate = {**first, "id": "fc_b"}
    rs = reasoning("rs_1", "enc-streamed")
    rs_final = {**rs, "encrypted_content": "enc-final"}
    second = call_item("functions.bash:1", NEW, id="fc_c", status="in_progress", caller=PROGRAM)
    second_final = {**second, "fingerprint": "fp-final"}
    body = stream(
        streamed_call(0, first, first),
        streamed_call(1, duplicate, duplicate),
        streamed_item(2, rs, rs),
        streamed_call(3, second, second),
        completed([first, duplicate, rs_final, second_final]),
    )
    result = run(request(), body)
    check_grammar(result.events, exact=False)
    output = same_ids(result.events)
    assert [i["type"] for i in output] == ["function_call", "reasoning", "function_call"]
    assert output[0] == first
    assert output[1] == rs_final
    assert output[2]["fingerprint"] == "fp-final" and output[2]["status"] == "in_progress"
    assert decode_call_id(output[2]["call_id"]) == "functions.bash:1"


def test_final_items_are_matched_by_id_where_the_final_list_is_ordered_otherwise() -> None:
    """A relay whose final `output` lists the items in another order (or leaves some out):
    the item ids still say which is which."""
    rs = reasoning("rs_1", "enc-streamed")
    added = call_item("call_abcDEF123", "", id="fc_1", status="in_progress")
    done = {**added, "arguments": NEW}
    rs_final = {**rs, "encrypted_content": "enc-final"}
    body = stream(
        streamed_item(0, rs, rs),
        streamed_call(1, added, done),
        completed([{**done, "x_new": True}, rs_final]),
    )
    output = same_ids(run(request(), body).events)
    assert output == [rs_final, {**done, "x_new": True}]


def test_final_item_of_another_type_at_the_same_place_is_not_taken() -> None:
    rs = reasoning("", "enc-streamed")
    del rs["id"]
    message = {"type": "message", "role": "assistant", "content": [], "status": "completed"}
    body = stream(streamed_item(0, rs, rs), completed([message]))
    output = same_ids(run(request(), body).events)
    assert output == [rs]


def test_items_the_final_output_leaves_out_are_built_from_the_stream() -> None:
    rs = reasoning("rs_1", "enc-streamed")
    rs2 = reasoning("rs_2", "enc2-streamed")
    body = stream(
        streamed_item(0, rs, rs),
        streamed_item(1, rs2, rs2),
        completed([{**rs2, "encrypted_content": "enc2-final"}]),
    )
    output = same_ids(run(request(), body).events)
    assert output == [rs, {**rs2, "encrypted_content": "enc2-final"}]


def test_final_items_nobody_streamed_stay_out() -> None:
    rs = reasoning("rs_1", "enc-streamed")
    extra = reasoning("rs_9", "never-streamed")
    body = stream(streamed_item(0, rs, rs), completed([rs, extra]))
    assert same_ids(run(request(), body).events) == [rs]


def test_rewritten_ids_apply_to_the_final_item() -> None:
    """Missing item id and a Kimi call id: the stream minted both; the final item (which names
    other ids, or none) gets the ones the client saw."""
    added = call_item("functions.bash:0", "")
    done = {**added, "arguments": NEW, "status": "completed"}
    final = {**done, "id": "fc_late", "fingerprint": "fp-final"}
    body = stream(streamed_call(0, added, done), completed([final]))
    result = run(request(), body)
    check_grammar(result.events, exact=False)
    (call,) = same_ids(result.events)
    assert call["fingerprint"] == "fp-final"
    assert call["id"].startswith("fc_") and call["id"] != "fc_late"
    assert decode_call_id(call["call_id"]) == "functions.bash:0"


def test_final_call_arguments_are_the_ones_the_client_got() -> None:
    """The final item's arguments as an object (or empty) follow the arguments rules (SPEC §4):
    the client's output holds what its deltas said."""
    added = call_item("call_abcDEF123", "", id="fc_1")
    done = {**added, "arguments": NEW}
    body = stream(
        streamed_call(0, added, done), completed([{**done, "arguments": {"command": "pwd"}}])
    )
    (call,) = same_ids(run(request(), body).events)
    assert call["arguments"] == NEW


def test_incomplete_response_takes_the_final_items_too() -> None:
    rs = reasoning("rs_1", "enc-streamed")
    rs_final = {**rs, "encrypted_content": "enc-final"}
    body = stream(streamed_item(0, rs, rs), completed([rs_final], kind="response.incomplete"))
    assert same_ids(run(request(), body).events) == [rs_final]


def test_recovered_text_calls_keep_the_client_text_in_the_final_message() -> None:
    """The final message still carries the markup: the client gets it as its stream said (the
    text without the markup), with the upstream's other fields, and the recovered call."""
    upstream = Upstream().created().message("Ok. ", KIMI_MARKUP)
    message = {
        "type": "message",
        "id": "msg_0",
        "role": "assistant",
        "status": "completed",
        "phase": "final_answer",
        "content": [{"type": "output_text", "text": "Ok. " + KIMI_MARKUP, "annotations": []}],
    }
    body = upstream.body() + completed([message])
    result = run(request(), body)
    check_grammar(result.events, exact=False)
    first, call = same_ids(result.events)
    assert first["phase"] == "final_answer"
    assert first["content"][0]["text"] == "Ok. "
    assert call["name"] == "bash" and orjson.loads(call["arguments"]) == {"command": "ls"}


def test_follow_up_rounds_each_take_their_own_final_items() -> None:
    """A replay-only round with reasoning, then the continuation: every round's items are the
    upstream's final ones, and an item id repeated by the second round keeps the new id the
    client saw."""
    rs1 = reasoning("rs_1", "enc1-streamed")
    rs1_final = {**rs1, "encrypted_content": "enc1-final"}
    replay = call_item("functions.bash:0", OLD, id="fc_1", status="completed")
    round1 = stream(
        streamed_item(0, rs1, rs1), streamed_call(1, replay, replay), completed([rs1_final, replay])
    )
    rs2 = reasoning("rs_1", "enc2-streamed")  # the same item id again
    rs2_final = {**rs2, "encrypted_content": "enc2-final"}
    fresh = call_item("functions.bash:1", NEW, id="fc_2", status="in_progress", caller=PROGRAM)
    round2 = stream(
        streamed_item(0, rs2, rs2),
        streamed_call(1, fresh, fresh),
        completed([rs2_final, {**fresh, "fingerprint": "fp2"}]),
    )
    result = run(_replay_history(), round1, round2)
    assert len(result.followups) == 1
    check_grammar(result.events, exact=False)
    output = same_ids(result.events)
    assert [i["type"] for i in output] == ["reasoning", "reasoning", "function_call"]
    assert output[0] == rs1_final
    assert output[1]["encrypted_content"] == "enc2-final" and output[1]["id"] != "rs_1"
    assert output[2]["fingerprint"] == "fp2" and output[2]["status"] == "in_progress"
    # The follow-up request repeats the round's items as the upstream last described them.
    followup = orjson.loads(result.followups[0].body)
    sent = [i for i in followup["input"] if i.get("type") == "reasoning"]
    assert sent == [rs1_final]


def test_upstream_failure_lists_the_final_items_too() -> None:
    rs = reasoning("rs_1", "enc-streamed")
    rs_final = {**rs, "encrypted_content": "enc-final"}
    failed = event(
        "response.failed",
        response=response_obj(
            "failed", output=[rs_final], error={"code": "server_error", "message": "boom"}
        ),
        sequence_number=5,
    )
    result = run(request(), stream(streamed_item(0, rs, rs), failed))
    assert result.events[-1]["type"] == "response.failed"
    assert result.events[-1]["response"]["output"] == [rs_final]


def test_guard_off_replay_rules_do_not_change_final_matching() -> None:
    """With the guard off nothing is dropped: the final items map one to one."""
    call = call_item("functions.bash:0", OLD, id="fc_1", status="in_progress", caller=PROGRAM)
    body = stream(streamed_call(0, call, call), completed([{**call, "fingerprint": "f"}]))
    result = run(_replay_history(), body, rules=RouteRules(replay_guard=False))
    (out,) = same_ids(result.events)
    assert out["fingerprint"] == "f" and out["status"] == "in_progress"


def test_final_items_are_matched_by_place_past_drops_without_ids() -> None:
    """No item ids anywhere: the upstream's output_index (its final list's order) still puts
    each final item on its streamed item after a dropped duplicate, where the client's own
    index would take the duplicate's."""
    call = call_item("call_abcDEF123", OLD, status="completed")
    rs = reasoning("", "enc-streamed")
    del rs["id"]
    rs_final = {**rs, "encrypted_content": "enc-final"}
    body = stream(
        streamed_call(0, call, call),
        streamed_call(1, call, call),
        streamed_item(2, rs, rs),
        completed([{**call, "x": 0}, {**call, "x": 1}, rs_final]),
    )
    output = same_ids(run(request(), body).events)
    assert [i["type"] for i in output] == ["function_call", "reasoning"]
    assert output[0]["x"] == 0
    assert output[1] == rs_final


# -- a property: whatever the stream's quirks, each final item lands on its own streamed item ---

QUIRK = st.fixed_dictionaries(
    {
        "call_id": st.sampled_from([None, "", "functions.bash:0", "bash_0", "call_abcDEF123", 0]),
        "item_id": st.sampled_from([None, "", "fc_1", "fc_2"]),
        "whole": st.booleans(),
        "deltas": st.booleans(),
        "done": st.booleans(),
        "item_done": st.booleans(),
    }
).filter(lambda q: q["whole"] or q["deltas"] or q["done"] or q["item_done"])  # args are sent
# A call (its quirks), a repeat of the last call (a duplicate the proxy drops), a message, or a
# reasoning item; and whether the upstream's final list names the item.
ITEMS = st.lists(
    st.tuples(
        st.one_of(QUIRK, st.just("repeat"), st.just("message"), st.just("reasoning")),
        st.booleans(),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(items=ITEMS, split=st.sampled_from([None, 9, 200]))
def test_each_final_item_lands_on_its_own_streamed_item(
    items: list[tuple[Any, bool]], split: int | None
) -> None:
    upstream = Upstream().created()
    finals: list[dict[str, Any]] = []
    last: dict[str, Any] | None = None
    copied: set[int] = set()  # calls a later item repeats
    for n, (kind, listed) in enumerate(items):
        if kind == "repeat" and last is not None:
            quirk, final = last["quirk"], {**last["final"], "x": n}
            copied.add(orjson.loads(final["arguments"])["n"])
        elif kind in ("repeat", "message"):
            upstream.message(f"text {n}")
            part = {"type": "output_text", "text": f"text {n}", "annotations": []}
            final = {"type": "message", "id": f"msg_{n}", "role": "assistant", "content": [part]}
            finals.append({**final, "status": "completed", "x": n} if listed else {})
            continue
        elif kind == "reasoning":
            rs = reasoning(f"rs_{n}", f"old {n}")
            upstream.raw(b"".join(streamed_item(n, rs, rs)))
            upstream.index += 1
            finals.append({**rs, "encrypted_content": f"new {n}", "x": n} if listed else {})
            continue
        else:
            quirk = kind
            final = call_item(
                None if quirk["call_id"] is None else quirk["call_id"],
                f'{{"n":{n}}}',
                status="completed",
                x=n,
            )
            if quirk["item_id"] is not None:
                final["id"] = quirk["item_id"]
            last = {"quirk": quirk, "final": final}
        upstream.call(arguments=final["arguments"], **quirk)
        finals.append(final if listed else {})
    upstream.raw(completed([f for f in finals if f] if all(finals) else finals))
    result = run(request(), upstream.body(), split=split)
    check_grammar(result.events, exact=False)
    output = same_ids(result.events)
    done = done_items(result.events)
    for mine, streamed in zip(output, done, strict=True):
        source = _source(mine)
        if source not in copied:
            # An item of its own: it takes its final item exactly when the list names it.
            assert mine.get("x", None) == (source if finals[source] else None)
        if "x" not in mine:
            assert mine == streamed  # built from the stream
            continue
        n = mine.pop("x")
        assert finals[n], "an item the final list left out cannot take a final item"
        if mine["type"] == "function_call":
            assert orjson.loads(mine["arguments"])["n"] == orjson.loads(finals[n]["arguments"])["n"]
            assert mine == streamed
        elif mine["type"] == "reasoning":
            assert mine == {**streamed, "encrypted_content": f"new {n}"}
        else:
            assert mine == streamed and mine["content"][0]["text"] == f"text {n}"


def _source(item: dict[str, Any]) -> int:
    """Which generated item the client's item streamed from, by what it carries."""
    if item["type"] == "function_call":
        n: int = orjson.loads(item["arguments"])["n"]
        return n
    if item["type"] == "reasoning":
        return int(item["id"].removeprefix("rs_"))
    return int(item["content"][0]["text"].removeprefix("text "))


def test_item_left_open_is_not_replaced_by_another_item_of_the_final_list() -> None:
    """A message the upstream never finished, and a final list whose item at its place is
    something else (a relay that orders or numbers otherwise): the message is built from what
    was streamed, never turned into that other item."""
    upstream = Upstream().created().message("partial", done=False)
    other = call_item("functions.bash:7", id="fc_other", status="completed")
    result = run(request(), upstream.body() + completed([other]))
    check_grammar(result.events, exact=False)
    (message,) = same_ids(result.events)
    assert message["type"] == "message" and message["content"][0]["text"] == "partial"
