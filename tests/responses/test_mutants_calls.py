"""SPEC §4, §8: what the mutation audit found unpinned in one call item
(proxy/responses/calls.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.events import Forward
from proxy.core.rounds import RouteRules
from proxy.responses.exchange import ResponsesExchange
from tests.responses.helpers import (
    Upstream,
    check_grammar,
    entropy,
    event,
    parse,
    request,
    run,
)

GRAMMARS = [
    ("function_call", "arguments", "response.function_call_arguments"),
    ("custom_tool_call", "input", "response.custom_tool_call_input"),
]


@pytest.mark.parametrize(("kind", "key", "prefix"), GRAMMARS)
def test_a_call_s_events_without_an_output_index_are_the_call_s(
    kind: str, key: str, prefix: str
) -> None:
    """A call opened without an `output_index`: its argument events, with none either, are
    its own (by their type), so the client gets them numbered as the call, and its text."""
    item: dict[str, Any] = {"type": kind, "id": "fc_up", "call_id": "c1", "name": "bash"}
    item |= {key: "", "status": "in_progress"}
    up = Upstream().created().raw(event("response.output_item.added", item=item))
    for piece in ('{"command"', ':"ls"}'):
        up.raw(event(f"{prefix}.delta", item_id="fc_up", delta=piece))
    events = run(request(), up.completed().body()).events
    final = check_grammar(events)
    deltas = [e for e in events if e["type"] == f"{prefix}.delta"]
    assert [(e["delta"], e["output_index"]) for e in deltas] == [
        ('{"command"', 0),
        (':"ls"}', 0),
    ]
    assert [e["type"] for e in events].count(f"{prefix}.done") == 1
    assert final["output"][0][key] == '{"command":"ls"}'


def first_read(up: Upstream, **extra: Any) -> list[dict[str, Any]]:
    """What the client has after one read of the upstream's events so far (no end)."""
    body = request(**extra)
    exchange = ResponsesExchange(body, orjson.dumps(body), RouteRules(), entropy=entropy)
    exchange.begin_round(stream=True)
    out = b""
    for item in exchange.feed(up.body()):
        if isinstance(item, bytes):
            out += item
        elif isinstance(item, Forward):
            out += item.data
    return parse(out)


def added_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.added"
        and e["item"]["type"] in ("function_call", "custom_tool_call")
    ]


def test_a_call_with_a_plain_raw_id_goes_out_before_its_arguments_are_whole() -> None:
    up = Upstream().created().call("c1", done=False, item_done=False)
    up.events = up.events[:-1]  # the last delta: the arguments stay unfinished
    events = first_read(up)
    assert [c["call_id"] for c in added_calls(events)] == ["c1"]
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert deltas == ['{"com', 'mand"', ':"ls"']


def _added_only(kind: str, key: str, whole: str, call_id: str | None) -> Upstream:
    item: dict[str, Any] = {"type": kind, "id": "fc_up", "name": "bash", key: whole}
    if call_id is not None:
        item["call_id"] = call_id
    added = event("response.output_item.added", output_index=0, item=item)
    return Upstream().created().raw(added)


def test_whole_arguments_in_the_added_item_decide_a_call_without_a_raw_id() -> None:
    events = first_read(_added_only("function_call", "arguments", '{"a":1}', None))
    [call] = added_calls(events)
    assert call["call_id"].startswith("call_") and call["arguments"] == ""
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert deltas == ['{"a":1}']


@pytest.mark.parametrize(
    ("kind", "key", "whole"),
    [
        ("function_call", "arguments", '{"a":'),
        ("custom_tool_call", "input", '{"a":1}'),
        ("custom_tool_call", "input", "ls"),
    ],
)
def test_unfinished_or_free_text_in_the_added_item_holds_a_call_without_a_raw_id(
    kind: str, key: str, whole: str
) -> None:
    """Only a function call's complete JSON is whole before the upstream closes it: a custom
    tool's input, JSON or not, may still grow."""
    events = first_read(_added_only(kind, key, whole, None))
    assert added_calls(events) == []


def test_a_call_whose_upstream_gives_no_status_gets_the_proxy_s_word_at_each_stage() -> None:
    item = {"type": "function_call", "id": "fc_up", "call_id": "c1", "name": "bash"}
    up = Upstream().created().raw(event("response.output_item.added", output_index=0, item=item))
    up.raw(event("response.function_call_arguments.done", output_index=0, arguments="{}"))
    final = {**item, "arguments": "{}"}
    up.raw(event("response.output_item.done", output_index=0, item=final))
    events = run(request(), up.completed().body()).events
    check_grammar(events)
    stages = [
        (e["type"], e["item"]["status"])
        for e in events
        if e["type"] in ("response.output_item.added", "response.output_item.done")
    ]
    assert stages == [
        ("response.output_item.added", "in_progress"),
        ("response.output_item.done", "completed"),
    ]


def test_deltas_repeating_whole_arguments_of_the_added_item_add_nothing() -> None:
    up = Upstream().created().call("c1", '{"command":"ls"}', whole=True).completed()
    events = run(request(), up.body()).events
    final = check_grammar(events)
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(deltas) == '{"command":"ls"}'
    assert final["output"][0]["arguments"] == '{"command":"ls"}'


@pytest.mark.parametrize("odd", [{"command": "ls"}, ["x"], 5, True])
def test_arguments_in_the_added_item_that_are_no_string_are_not_its_text(odd: object) -> None:
    up = Upstream().created().call("c1", '{"command":"pwd"}', done=False, item_done=False)
    head = orjson.loads(up.events[2].partition(b"data: ")[2])
    head["item"]["arguments"] = odd
    up.events[2] = event("response.output_item.added", **{k: head[k] for k in head if k != "type"})
    events = run(request(), up.completed().body()).events
    final = check_grammar(events)
    assert final["output"][0]["arguments"] == '{"command":"pwd"}'
