"""SPEC §11's shared rules (proxy.core.request_repair): the pairing plan, arguments made
parseable, empty schemas; and, over Chat Completions histories of any shape, the properties
the contract asks of them: the upstream's pairing rule holds after repair, nothing the model
could use is lost, the same history gives the same bytes, and appending turns never changes
the repaired prefix."""

from __future__ import annotations

import time
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.chat.history import translate_request
from proxy.core.request_repair import (
    KEEP,
    MARK,
    OTHER,
    RESULT,
    SYNTHETIC,
    TURN,
    ResultPairs,
    Unit,
    close_cut_object,
    object_schema,
    parseable_arguments,
    plan_pairing,
)


def plan(units: list[Unit]) -> list[tuple[int, int]] | None:
    pairs = ResultPairs()
    for at, unit in enumerate(units):
        if unit.kind == RESULT:
            unit.status = pairs.status(unit.ordinal, at)
    steps = plan_pairing(units, pairs.answer_of)
    if steps is None:
        return None
    return [(s.op, s.ordinal if s.op == SYNTHETIC else s.unit) for s in steps]


def test_a_paired_history_has_no_plan() -> None:
    units = [
        Unit(OTHER),
        Unit(TURN, calls=[0, 1]),
        Unit(RESULT, ordinal=1),
        Unit(RESULT, ordinal=0),
    ]
    assert plan(units) is None


def test_the_plan_answers_moves_and_marks() -> None:
    units = [
        Unit(TURN, calls=[0, 1, 2]),
        Unit(RESULT, ordinal=-1),  # an orphan, among the turn's results
        Unit(RESULT, ordinal=1),
        Unit(OTHER),
        Unit(RESULT, ordinal=0),  # further down: moved up
        Unit(RESULT, ordinal=0),  # a duplicate
    ]
    assert plan(units) == [
        (KEEP, 0),
        (KEEP, 2),
        (KEEP, 4),
        (SYNTHETIC, 2),
        (MARK, 1),
        (KEEP, 3),
        (MARK, 5),
    ]


def test_arguments() -> None:
    assert parseable_arguments('{"a": 1}') is None
    assert parseable_arguments('{"a": 1, "b": [1, {"c": "x') == '{"a": 1}'
    assert parseable_arguments('{"a": {"b": 1}, "c": 2, "d": tr') == '{"a": {"b": 1}, "c": 2}'
    assert parseable_arguments('{"a": "x\\"y", "b') == '{"a": "x\\"y"}'
    assert parseable_arguments('{"n": 12') == "{}"  # a number cut short may have gone on
    assert parseable_arguments('{"a":1}{"a":1}') == '{"a":1}'
    for other in ("", "[1]", "null", "42", '"text"', "nonsense", None, 7, ["x"]):
        assert parseable_arguments(other) == "{}", other
    assert close_cut_object("[1, 2") is None


def test_closing_cut_arguments_is_linear() -> None:
    """SPEC §6: no input makes the work grow with the square of its size."""

    def cost(n: int) -> float:
        text = '{"k": "' + "\\\\" * n + '", "a": [' + "[" * n
        start = time.perf_counter()
        parseable_arguments(text)
        return time.perf_counter() - start

    cost(1000)
    small, large = cost(20_000), cost(200_000)
    assert large < small * 40


def test_schemas() -> None:
    empty = {"type": "object", "properties": {}}
    assert object_schema(None) == empty and object_schema({}) == empty
    assert object_schema({"type": "object"}) is None
    assert object_schema({"type": "object", "properties": {"a": {}}}) is None


# -- properties over Chat Completions histories -----------------------------------------------

IDS = ["call_a", "call_b", "call_c", "call_d"]

events = st.lists(
    st.one_of(
        st.tuples(st.just("assistant"), st.lists(st.sampled_from(IDS), max_size=3, unique=True)),
        st.tuples(st.just("tool"), st.sampled_from([*IDS, "call_gone"])),
        st.tuples(st.just("user"), st.just("")),
        st.tuples(st.just("system"), st.just("")),
    ),
    max_size=12,
)


def history_of(steps: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for n, (role, value) in enumerate(steps):
        if role == "assistant":
            calls = [
                {"id": v, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                for v in value
            ]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        elif role == "tool":
            messages.append({"role": "tool", "tool_call_id": value, "content": f"result {n}"})
        else:
            messages.append({"role": role, "content": f"text {n}"})
    return messages


def strict_refusal(messages: list[dict[str, Any]]) -> str | None:
    """OpenAI's rule: an assistant message's calls are answered by the tool messages right
    after it, each once, and a tool message answers a call of that message."""
    awaiting: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] not in awaiting:
                return "messages with role 'tool' must be a response to a preceeding message"
            awaiting.remove(message["tool_call_id"])
            continue
        if awaiting:
            return "An assistant message with 'tool_calls' must be followed by tool messages"
        awaiting = [call["id"] for call in message.get("tool_calls") or ()]
    return "unanswered at the end" if awaiting else None


def sent(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    body = {"model": "m", "messages": messages}
    out: list[dict[str, Any]] = translate_request(body, "passthrough", repair=True).body["messages"]
    return out


@settings(max_examples=300, deadline=None)
@given(events)
def test_a_repaired_history_is_accepted_and_loses_nothing(steps: list[tuple[str, Any]]) -> None:
    history = history_of(steps)
    repaired = sent(history)
    assert strict_refusal(repaired) is None
    text = orjson.dumps(repaired).decode()
    for message in history:
        if isinstance(message.get("content"), str):
            assert message["content"] in text  # moved or marked, never dropped
    assert orjson.dumps(sent(history)) == orjson.dumps(repaired)  # deterministic


@settings(max_examples=300, deadline=None)
@given(events, events)
def test_appending_turns_keeps_the_repaired_prefix(
    steps: list[tuple[str, Any]], more: list[tuple[str, Any]]
) -> None:
    """Appending messages never changes how earlier ones were repaired; the one exception
    is a late result for a call that had none (SPEC §11), left out of what is appended."""
    history = history_of(steps)
    first = sent(history)
    later = history_of(more)[1:]
    ids = {m["tool_call_id"] for m in history if m["role"] == "tool"}
    ids |= {c["id"] for m in history for c in m.get("tool_calls") or ()}
    later = [m for m in later if m["role"] != "tool" or m["tool_call_id"] not in ids]
    # the first message appended ends the history's last turn, as a client's next turn does
    longer = sent([*history, {"role": "user", "content": "next"}, *later])
    assert orjson.dumps(longer[: len(first)]) == orjson.dumps(first)
