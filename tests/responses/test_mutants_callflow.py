"""SPEC §4, §5, §8: what the mutation audit found unpinned in a round's calls on their way
to the client (proxy/responses/callflow.py)."""

from __future__ import annotations

from typing import Any

from tests.responses.helpers import Upstream, check_grammar, event, request, run


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def test_arguments_only_in_the_done_event_are_the_call_s_text() -> None:
    up = Upstream().created().call("c1", '{"a":1}', deltas=False, item_done=False)
    events = run(request(), up.completed().body()).events
    final = check_grammar(events)
    deltas = _of(events, "response.function_call_arguments.delta")
    assert "".join(e["delta"] for e in deltas) == '{"a":1}'
    assert final["output"][0]["arguments"] == '{"a":1}'


def test_a_call_s_end_goes_out_before_the_next_item() -> None:
    up = Upstream().created().call("c1").message("after").completed()
    events = run(request(), up.body()).events
    check_grammar(events)
    ends = [e["type"] for e in events if e["type"].startswith("response.output_item.")]
    assert ends == [
        "response.output_item.added",
        "response.output_item.done",
        "response.output_item.added",
        "response.output_item.done",
    ]
    assert events[[e["type"] for e in events].index("response.output_item.done")]["item"][
        "type"
    ] == ("function_call")


def test_an_other_event_of_a_held_call_follows_it_once_delivered() -> None:
    """A call without a raw id is held until its arguments are whole; an event of its own
    that came meanwhile reaches the client after its header, numbered as the call."""
    up = Upstream().created().call(None, '{"a":1}', deltas=False, done=False, item_done=False)
    up.raw(event("response.function_call_arguments.note", output_index=0, item_id="fc_up", n=1))
    up.raw(event("response.function_call_arguments.done", output_index=0, arguments='{"a":1}'))
    events = run(request(), up.completed().body()).events
    kinds = [e["type"] for e in events]
    [note] = _of(events, "response.function_call_arguments.note")
    [added] = _of(events, "response.output_item.added")
    assert kinds.index("response.output_item.added") < kinds.index(note["type"])
    assert (note["n"], note["output_index"], note["item_id"]) == (1, 0, added["item"]["id"])


def test_a_call_without_arguments_gets_them_as_a_last_delta() -> None:
    up = Upstream().created().call("c1", "", item_done=False).completed()
    events = run(request(), up.body()).events
    final = check_grammar(events)
    deltas = _of(events, "response.function_call_arguments.delta")
    assert [e["delta"] for e in deltas] == ["{}"]
    [added] = _of(events, "response.output_item.added")
    assert deltas[0]["item_id"] == added["item"]["id"] and deltas[0]["output_index"] == 0
    assert final["output"][0]["arguments"] == "{}"


def test_a_final_item_naming_another_call_id_does_not_describe_the_streamed_call() -> None:
    up = Upstream().created().call("c1")
    listed = {"type": "function_call", "id": "fc_up", "call_id": "c2", "name": "bash"}
    listed |= {"arguments": '{"command":"ls"}', "status": "completed", "extra": 1}
    done = {"id": "resp_up", "object": "response", "created_at": 7, "model": "m"}
    done |= {"status": "completed", "output": [listed]}
    up.raw(event("response.completed", response=done))
    final = check_grammar(run(request(), up.body()).events)
    assert "extra" not in final["output"][0]
    assert final["output"][0]["call_id"] == "c1"


def test_each_delta_of_a_call_goes_out_as_it_comes() -> None:
    up = Upstream().created().call("c1", '{"command":"ls -la"}').completed()
    events = run(request(), up.body()).events
    check_grammar(events)
    deltas = [e["delta"] for e in _of(events, "response.function_call_arguments.delta")]
    assert deltas == ['{"com', 'mand"', ':"ls ', '-la"}']
