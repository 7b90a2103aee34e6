"""SPEC §8, §9: every field of every event the Responses bridge streams for its items
(reasoning, a message with text and refusal parts, a function call and a custom tool call),
and items that close one another in any order. The mutation audit found the events' fields
(`content_index` only on content events, `logprobs` only on text, statuses, the text of the
`.done` events) and some closing orders unchecked."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.bridge.responses_chat.reasoning import seal
from tests.bridge.responses_chat.wire import PATCH, body, run
from tests.chat.helpers import chunk, finish, frag, header, role, sse, text
from tests.responses.helpers import check_grammar, parse

JSON = dict[str, Any]


def client_events(upstream: bytes) -> list[JSON]:
    """The client's events, each id the bridge minted named by the output index of its item,
    the response's head and end without their fixed fields, and without sequence numbers
    (the grammar check covers them)."""
    events = parse(run(body(), [[upstream]]).client)
    check_grammar(events)
    names = {
        e["item"]["id"]: f"<item {e['output_index']}>"
        for e in events
        if e["type"] == "response.output_item.added"
    }

    def named(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: named(v) for k, v in value.items()}
        if isinstance(value, list):
            return [named(v) for v in value]
        return names.get(value, value) if isinstance(value, str) else value

    out = []
    for event in events:
        event = named(event)
        del event["sequence_number"]
        if "response" in event:
            event["response"] = {k: event["response"][k] for k in ("status", "output")}
        out.append(event)
    return out


def ref(kind: str, index: int, content_index: int | None = None, **fields: Any) -> JSON:
    event: JSON = {"type": kind, "item_id": f"<item {index}>", "output_index": index}
    if content_index is not None:
        event["content_index"] = content_index
    return {**event, **fields}


def added(index: int, item: JSON) -> JSON:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def done(index: int, item: JSON) -> JSON:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


OUTPUT_TEXT = {"type": "output_text", "text": "Hi there", "annotations": [], "logprobs": []}
REASONING = {
    "id": "<item 0>",
    "type": "reasoning",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "Thinking."}],
    "encrypted_content": seal("Thinking."),
    "status": "completed",
}
MESSAGE = {
    "id": "<item 1>",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [OUTPUT_TEXT, {"type": "refusal", "refusal": "Nope"}],
}
SHELL_CALL = {
    "id": "<item 2>",
    "type": "function_call",
    "call_id": "call_a",
    "name": "shell",
    "arguments": '{"cmd":"ls"}',
    "status": "completed",
}
PATCH_CALL = {
    "id": "<item 3>",
    "type": "custom_tool_call",
    "call_id": "call_b",
    "name": "apply_patch",
    "input": PATCH,
    "status": "completed",
}


def test_every_event_of_each_kind_of_item_with_all_its_fields() -> None:
    upstream = sse(
        role(),
        chunk({"reasoning_content": "Think"}),
        chunk({"reasoning_content": "ing."}),
        text("Hi"),
        text(" there"),
        chunk({"refusal": "No"}),
        chunk({"refusal": "pe"}),
        chunk({"tool_calls": [header(0, "call_a", "shell", "")]}),
        chunk({"tool_calls": [header(1, "call_b", "apply_patch", '{"input":')]}),
        chunk({"tool_calls": [frag(0, '{"cmd":"ls"}')]}),
        chunk({"tool_calls": [frag(1, json.dumps(PATCH) + "}")]}),
        finish("tool_calls"),
    )
    head = {"status": "in_progress", "output": []}
    msg_text = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    assert client_events(upstream) == [
        {"type": "response.created", "response": head},
        {"type": "response.in_progress", "response": head},
        added(0, {"id": "<item 0>", "type": "reasoning", "summary": [], "content": []}),
        ref("response.content_part.added", 0, 0, part={"type": "reasoning_text", "text": ""}),
        ref("response.reasoning_text.delta", 0, 0, delta="Think"),
        ref("response.reasoning_text.delta", 0, 0, delta="ing."),
        ref("response.reasoning_text.done", 0, 0, text="Thinking."),
        ref("response.content_part.done", 0, 0, part=REASONING["content"][0]),
        done(0, REASONING),
        added(
            1,
            {
                "id": "<item 1>",
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            },
        ),
        ref("response.content_part.added", 1, 0, part=msg_text),
        ref("response.output_text.delta", 1, 0, delta="Hi", logprobs=[]),
        ref("response.output_text.delta", 1, 0, delta=" there", logprobs=[]),
        ref("response.content_part.added", 1, 1, part={"type": "refusal", "refusal": ""}),
        ref("response.refusal.delta", 1, 1, delta="No"),
        ref("response.refusal.delta", 1, 1, delta="pe"),
        ref("response.output_text.done", 1, 0, text="Hi there", logprobs=[]),
        ref("response.content_part.done", 1, 0, part=OUTPUT_TEXT),
        ref("response.refusal.done", 1, 1, refusal="Nope"),
        ref("response.content_part.done", 1, 1, part={"type": "refusal", "refusal": "Nope"}),
        done(1, MESSAGE),
        added(2, {**SHELL_CALL, "arguments": "", "status": "in_progress"}),
        added(3, {**PATCH_CALL, "input": "", "status": "in_progress"}),
        ref("response.function_call_arguments.delta", 2, delta='{"cmd":"ls"}'),
        ref("response.function_call_arguments.done", 2, arguments='{"cmd":"ls"}'),
        done(2, SHELL_CALL),
        ref("response.custom_tool_call_input.delta", 3, delta=PATCH),
        ref("response.custom_tool_call_input.done", 3, input=PATCH),
        done(3, PATCH_CALL),
        {
            "type": "response.completed",
            "response": {
                "status": "completed",
                "output": [REASONING, MESSAGE, SHELL_CALL, PATCH_CALL],
            },
        },
    ]


CALL = chunk({"tool_calls": [header(0, "call_a", "shell", '{"cmd":"ls"}')]})


@pytest.mark.parametrize(
    ("deltas", "kinds"),
    [
        ((text("Hi"), chunk({"reasoning_content": "Hmm."})), ["message", "reasoning"]),
        ((chunk({"reasoning_content": "Hmm."}), CALL), ["reasoning", "function_call"]),
        ((chunk({"reasoning_content": "Hmm."}),), ["reasoning"]),
    ],
    ids=["text-then-reasoning", "reasoning-then-call", "reasoning-alone"],
)
def test_an_item_closes_when_another_kind_begins_or_the_choice_ends(
    deltas: tuple[JSON, ...], kinds: list[str]
) -> None:
    events = parse(run(body(), [[sse(role(), *deltas, finish("stop"))]]).client)
    response = check_grammar(events)
    assert [item["type"] for item in response["output"]] == kinds
    # Each item is done before the next one is added.
    order = [e["type"] for e in events if e["type"].startswith("response.output_item.")]
    assert order == ["response.output_item.added", "response.output_item.done"] * len(kinds)


def test_a_text_part_after_a_refusal_part_is_the_second_content_part() -> None:
    upstream = sse(role(), chunk({"refusal": "No."}), text("But here is why."), finish("stop"))
    events = parse(run(body(), [[upstream]]).client)
    check_grammar(events)
    done = {e["type"]: e["content_index"] for e in events if "content_index" in e}
    assert done["response.refusal.done"] == 0
    assert done["response.output_text.done"] == 1
