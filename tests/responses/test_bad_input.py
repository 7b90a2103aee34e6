"""Bad upstream input never crashes the Responses core (SPEC §6): events of every known type
with fields of any JSON type, out of order, streaming and as whole bodies."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.responses.helpers import event, request, run

TYPES = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.output_item.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.custom_tool_call_input.delta",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
]
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.text(max_size=12))
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
ITEM = st.fixed_dictionaries(
    {"type": st.sampled_from(["function_call", "custom_tool_call", "message", "reasoning", 3])},
    optional={
        "call_id": VALUE,
        "id": VALUE,
        "name": VALUE,
        "arguments": VALUE,
        "input": VALUE,
        "content": VALUE,
    },
)
EVENT = st.fixed_dictionaries(
    {"type": st.sampled_from(TYPES)},
    optional={
        "output_index": st.one_of(st.integers(-1, 3), VALUE),
        "item": st.one_of(ITEM, VALUE),
        "delta": VALUE,
        "arguments": VALUE,
        "text": VALUE,
        "content_index": VALUE,
        "part": VALUE,
        "response": st.one_of(
            st.fixed_dictionaries({}, optional={"output": VALUE, "usage": VALUE, "id": VALUE}),
            VALUE,
        ),
    },
)


def _history() -> dict[str, Any]:
    items = [
        {"type": "function_call", "call_id": "functions.bash:0", "name": "bash", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "functions.bash:0", "output": "ok"},
    ]
    return request(*items, model="kimi-k2")


@settings(max_examples=300, deadline=None)
@given(events=st.lists(EVENT, max_size=10), split=st.integers(1, 64))
def test_any_events_stream(events: list[dict[str, Any]], split: int) -> None:
    body = b"".join(event(e.pop("type"), **e) for e in events)
    run(_history(), body, body, split=split)


@settings(max_examples=200, deadline=None)
@given(output=st.one_of(st.lists(st.one_of(ITEM, VALUE), max_size=4), VALUE), usage=VALUE)
def test_any_whole_body(output: Any, usage: Any) -> None:
    body = orjson.dumps({"id": "resp_1", "output": output, "usage": usage})
    run({**_history(), "stream": False}, body, body, stream=False)


def test_unfinished_message_with_odd_part_indexes_is_completed() -> None:
    added = event(
        "response.output_item.added",
        output_index=0,
        item={"type": "message", "id": "m", "role": "assistant", "content": []},
    )
    deltas = b"".join(
        event("response.output_text.delta", output_index=0, content_index=index, delta=text)
        for index, text in ((1, "b"), ("x", "c"), (0, "a"), ([2], "d"))
    )
    result = run(request(), added + deltas)
    final = result.events[-1]["response"]["output"][0]
    texts = [part["text"] for part in final["content"]]
    assert texts[:2] == ["a", "b"] and sorted(texts[2:]) == ["c", "d"]


def test_a_call_closed_by_a_done_event_of_another_type_stays_a_call() -> None:
    """Found by test_any_events_stream: `output_item.done` naming a `message` at the index of an
    open function call crashed the core (the call's grammar was looked up by the new type)."""
    events = [
        {"type": "response.output_item.added", "item": {"type": "function_call"}},
        {"type": "response.output_item.done", "item": {"type": "message"}},
    ]
    body = b"".join(b"data: " + orjson.dumps(event) + b"\n\n" for event in events)
    run(_history(), body, body, split=1)
