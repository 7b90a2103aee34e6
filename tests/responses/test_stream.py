"""SPEC §8 canonical streams on Responses: whatever shape the upstream used, the client gets
the event grammar the SDKs accumulate (checked by `check_grammar`, which also runs the openai
SDK's own stream state over it), with unique call ids that decode to the upstream's."""

from __future__ import annotations

import orjson
import pytest

from proxy.responses.ids import decode_call_id
from tests.responses.helpers import (
    Upstream,
    answered_call,
    calls_of,
    check_grammar,
    event,
    request,
    run,
)

ARGS = '{"command":"ls -la"}'


@pytest.mark.parametrize("split", [None, 1, 7, 64])
def test_reference_stream_keeps_native_ids_and_passes_text(split: int | None) -> None:
    upstream = (
        Upstream().created().message("Let me ", "look.").call("call_abcDEF123", ARGS).completed()
    )
    result = run(request(), upstream.body(), split=split)
    final = check_grammar(result.events)
    assert calls_of(final)[0]["call_id"] == "call_abcDEF123"
    assert calls_of(final)[0]["id"] == "fc_up"
    assert final["output"][0]["content"][0]["text"] == "Let me look."
    assert final["id"] == "resp_up"


# Quirks of QUIRKS.md's Responses lines, each with the shape the client must still get.
QUIRKS = {
    "kimi restarted counter": dict(call_id="functions.bash:0"),
    "whole arguments in output_item.added": dict(
        call_id="functions.bash:0", whole=True, deltas=False
    ),
    "whole arguments in added, then deltas repeating them": dict(
        call_id="functions.bash:0", whole=True
    ),
    "final flush of the whole arguments": dict(call_id="call_xyzABC987", flush=True),
    "no .done events": dict(call_id="functions.bash:0", done=False, item_done=False),
    "no arguments .done": dict(call_id="functions.bash:0", done=False),
    "missing item id": dict(call_id="functions.bash:0", item_id=None),
    "empty item id": dict(call_id="functions.bash:0", item_id=""),
    "missing call_id": dict(call_id=None),
    "empty call_id": dict(call_id=""),
    "numeric call_id": dict(call_id=0),
    "only .done carries the arguments": dict(call_id="functions.bash:0", deltas=False),
}


@pytest.mark.parametrize("quirk", sorted(QUIRKS))
@pytest.mark.parametrize("split", [None, 3])
def test_quirks_become_the_canonical_grammar(quirk: str, split: int | None) -> None:
    upstream = Upstream().created().call(arguments=ARGS, **QUIRKS[quirk]).completed()  # type: ignore[arg-type]
    result = run(request(), upstream.body(), split=split)
    final = check_grammar(result.events)
    (call,) = calls_of(final)
    assert orjson.loads(call["arguments"]) == {"command": "ls -la"}
    assert call["id"].startswith("fc_") and call["call_id"].startswith("call_")


def test_restarted_counter_gets_an_encoded_unique_id_per_response() -> None:
    """`functions.bash:0` every response: each client id is new and decodes to the raw id."""
    body = request(*answered_call("call_0badf00d_functions.bash:0"))
    upstream = Upstream().created().call("functions.bash:0", '{"command":"pwd"}').completed()
    final = check_grammar(run(body, upstream.body()).events)
    call_id = calls_of(final)[0]["call_id"]
    assert call_id != "call_0badf00d_functions.bash:0"
    assert decode_call_id(call_id) == "functions.bash:0"
    assert len(call_id) <= 64


def test_raw_id_over_50_characters_gets_a_turn_scoped_id() -> None:
    raw = "functions." + "x" * 45 + ":0"
    upstream = Upstream().created().call(raw, name="bash").completed()
    final = check_grammar(run(request(), upstream.body()).events)
    call_id = calls_of(final)[0]["call_id"]
    assert decode_call_id(call_id) is None
    assert call_id.startswith("call_1_0_") and len(call_id) <= 40


def test_repeated_item_ids_and_call_ids_in_one_response() -> None:
    """Two calls under the same `call_id` and item `id` with different arguments (QUIRKS.md: a
    client keyed by id answered one `exec_command:0` and got a 400 for the other): both reach
    the client, each with its own ids, and both decode to what the upstream issued."""
    upstream = (
        Upstream()
        .created()
        .call("grep:3", '{"command":"a"}', item_id="fc_same")
        .call("grep:3", '{"command":"b"}', item_id="fc_same")
        .completed()
    )
    final = check_grammar(run(request(), upstream.body()).events)
    first, second = calls_of(final)
    assert first["call_id"] != second["call_id"]
    assert decode_call_id(first["call_id"]) == decode_call_id(second["call_id"]) == "grep:3"
    assert first["id"] == "fc_same" and second["id"].startswith("fc_") and second["id"] != "fc_same"


def test_duplicate_call_in_one_response_is_dropped() -> None:
    upstream = Upstream().created().call("bash_0", ARGS).call("bash_0", ARGS).completed()
    final = check_grammar(run(request(), upstream.body()).events)
    assert len(calls_of(final)) == 1


def test_missing_response_completed_is_completed() -> None:
    upstream = Upstream().created().message("hi").call("functions.bash:0", ARGS)
    result = run(request(), upstream.body())
    final = check_grammar(result.events)
    assert result.ended and final["status"] == "completed" and len(final["output"]) == 2


def test_missing_everything_after_the_deltas_is_completed() -> None:
    upstream = (
        Upstream()
        .created()
        .message("hi", done=False)
        .call("functions.bash:0", ARGS, done=False, item_done=False)
    )
    final = check_grammar(run(request(), upstream.body()).events)
    assert final["output"][0]["content"][0]["text"] == "hi"


def test_reasoning_builtin_items_and_unknown_events_pass_unchanged() -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "encrypted_content": "gAAAA-opaque",
    }
    search = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search"},
    }
    upstream = (
        Upstream()
        .created()
        .raw(event("response.output_item.added", output_index=0, item=reasoning, sequence_number=2))
        .raw(
            event(
                "response.reasoning_summary_text.delta",
                output_index=0,
                item_id="rs_1",
                summary_index=0,
                delta="hm",
                sequence_number=3,
            )
        )
        .raw(event("response.output_item.done", output_index=0, item=reasoning, sequence_number=4))
        .raw(event("response.output_item.added", output_index=1, item=search, sequence_number=5))
        .raw(
            event(
                "response.web_search_call.completed",
                output_index=1,
                item_id="ws_1",
                sequence_number=6,
            )
        )
        .raw(event("response.output_item.done", output_index=1, item=search, sequence_number=7))
        .raw(event("response.future_thing", detail={"x": 1}, sequence_number=8))
        .raw(b": keep-alive\n\n")
    )
    upstream.index = 2
    upstream.call("functions.bash:0", ARGS).completed()
    result = run(request(), upstream.body())
    final = check_grammar(result.events, passed_on=frozenset({"response.future_thing"}))
    assert final["output"][0] == reasoning and final["output"][1] == search
    summary = [e for e in result.events if e["type"] == "response.reasoning_summary_text.delta"]
    assert summary[0]["delta"] == "hm" and summary[0]["item_id"] == "rs_1"
    assert any(
        e["type"] == "response.future_thing" and e["detail"] == {"x": 1} for e in result.events
    )
    assert b": keep-alive" in result.body


def test_an_unknown_event_at_a_calls_index_is_the_calls() -> None:
    """An event of a kind no rule names, at a call's `output_index`, reaches the client at
    that call's client index and item id, after the call's `output_item.added` (SPEC §4:
    no index that no item announced); a replayed call's such event is dropped with it."""
    thing = event("response.future_thing", output_index=0, item_id="fc_up", sequence_number=3)
    upstream = Upstream().created().message("hi")
    upstream.call("functions.bash:0", ARGS, done=False, item_done=False)
    upstream.raw(thing.replace(b'"output_index":0', b'"output_index":1'))
    done = event(
        "response.function_call_arguments.done",
        output_index=1,
        item_id="fc_up",
        arguments=ARGS,
        sequence_number=4,
    )
    upstream.raw(done).completed()
    result = run(request(), upstream.body())
    check_grammar(result.events, passed_on=frozenset({"response.future_thing"}))
    added = next(
        e
        for e in result.events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    )
    [thing_out] = [e for e in result.events if e["type"] == "response.future_thing"]
    assert thing_out["output_index"] == added["output_index"] == 1
    assert thing_out["item_id"] == added["item"]["id"]
    assert result.events.index(thing_out) > result.events.index(added)
    indexes = {e["output_index"] for e in result.events if "output_index" in e}
    assert indexes == {0, 1}

    bare = event("response.future_thing", output_index=1, sequence_number=3)
    unnamed = Upstream().created()
    unnamed.call("functions.bash:0", ARGS, done=False, item_done=False)
    unnamed.raw(bare.replace(b'"output_index":1', b'"output_index":0')).completed()
    [bare_out] = [
        e for e in run(request(), unnamed.body()).events if e["type"] == "response.future_thing"
    ]
    assert "item_id" not in bare_out  # not a field the upstream sent

    replayed = run(request(*answered_call("functions.bash:0", ARGS)), upstream.body())
    assert not [e for e in replayed.events if e["type"] == "response.future_thing"]


def test_held_call_is_delivered_after_a_later_item_with_dense_indexes() -> None:
    """A possible replay waits for its arguments; a message that starts meanwhile takes the
    next client index first (SPEC §4)."""
    body = request(*answered_call("functions.bash:0"))
    upstream = Upstream().created()
    upstream.events.append(
        event(
            "response.output_item.added",
            output_index=0,
            item={
                "type": "function_call",
                "id": "fc_a",
                "call_id": "functions.bash:1",
                "name": "bash",
                "arguments": "",
            },
            sequence_number=1,
        )
    )
    upstream.index = 1
    upstream.message("meanwhile")
    upstream.events.append(
        event(
            "response.function_call_arguments.delta",
            output_index=0,
            item_id="fc_a",
            delta='{"command":"new"}',
            sequence_number=9,
        )
    )
    upstream.events.append(
        event(
            "response.output_item.done",
            output_index=0,
            item={
                "type": "function_call",
                "id": "fc_a",
                "call_id": "functions.bash:1",
                "name": "bash",
                "arguments": '{"command":"new"}',
            },
            sequence_number=9,
        )
    )
    upstream.completed()
    body = request(*answered_call("functions.bash:1"), model="m")
    final = check_grammar(run(body, upstream.body()).events)
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]


def test_non_json_data_becomes_a_comment() -> None:
    upstream = (
        Upstream().created().raw(b"data: not json\n\n").call("call_abcDEF123", ARGS).completed()
    )
    result = run(request(), upstream.body())
    check_grammar(result.events)
    assert b": not json" in result.body
    assert result.exchange.report()[1] == 1


def test_upstream_failure_is_relayed_and_ends_the_response() -> None:
    failed = event(
        "response.failed",
        response={
            **{"id": "resp_up", "status": "failed"},
            "error": {"code": "server_error", "message": "boom"},
        },
        sequence_number=5,
    )
    result = run(request(), Upstream().created().message("hi").raw(failed).body())
    types = result.types()
    assert types[-1] == "response.failed" and "response.completed" not in types
    assert result.events[-1]["response"]["error"]["message"] == "boom"


def test_upstream_error_event_then_end_is_not_completed() -> None:
    error = event("error", code="server_error", message="overloaded", sequence_number=4)
    result = run(request(), Upstream().created().message("hi").raw(error).body())
    types = result.types()
    assert types[-1] == "error" and "response.completed" not in types
    assert result.ended


def test_event_named_only_in_its_event_line() -> None:
    """A relay that leaves `type` out of the data: the `event:` line names it."""
    body = Upstream().created().call("call_abcDEF123", ARGS).completed().body()
    stripped = body.replace(b'"type":"response.', b'"kind":"response.')
    final = check_grammar(run(request(), stripped).events)
    assert calls_of(final)[0]["call_id"] == "call_abcDEF123"
