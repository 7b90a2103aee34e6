"""Response direction of both bridges, fuzzed (SPEC §4, §8, §9): whatever Chat stream or
completion the upstream sends (calls with Kimi, empty, missing or recurring ids, any finish
reason, usage or none; then cut short, `{`-garbage lines, an error object, `[DONE]` missing,
events after it), the exchange never raises anything the shell does not map, and the client
gets its own API's grammar: the same bytes however the upstream's body was split into
reads, and for a whole completion a valid response object (or an error the shell renders)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.bridge.anthropic_chat import new_anthropic_over_chat
from proxy.bridge.responses_chat.exchange import new_responses_over_chat
from proxy.core.errors import ProxyError
from proxy.core.rounds import RouteRules
from tests.bridge.fuzz.fuzz_grammar import (
    check_anthropic_message,
    check_anthropic_stream,
    check_response_object,
    check_responses_stream,
)
from tests.bridge.fuzz.fuzz_settings import SETTINGS
from tests.bridge.fuzz.fuzz_streams import (
    Damage,
    Outcome,
    Plan,
    completion_bytes,
    corrupt,
    counter_entropy,
    damages,
    plans,
    play,
    split,
    stream_events,
)

JSON = dict[str, Any]

SHELL_SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}}}
RESPONSES_REQUEST: JSON = {
    "model": "kimi-k2",
    "store": False,
    "input": [
        {"type": "message", "role": "user", "content": "list files"},
        {
            "type": "function_call",
            "call_id": "call_1_0_ab12cd34",
            "name": "shell",
            "arguments": '{"cmd":"ls"}',
        },
        {"type": "function_call_output", "call_id": "call_1_0_ab12cd34", "output": "a.txt"},
    ],
    "tools": [
        {"type": "function", "name": "shell", "parameters": SHELL_SCHEMA},
        {"type": "custom", "name": "apply_patch", "description": "Edit files."},
        {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "inner"}]},
    ],
}
ANTHROPIC_REQUEST: JSON = {
    "model": "kimi-k2",
    "max_tokens": 512,
    "messages": [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1_0_ab12cd34",
                    "name": "Bash",
                    "input": {"cmd": "ls"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1_0_ab12cd34", "content": "a.txt"}
            ],
        },
    ],
    "tools": [{"name": "Bash", "input_schema": SHELL_SCHEMA}],
}


def same_entropy(n: int) -> bytes:
    return b"\x3c" * n


RESPONSES_NAMES = ["shell", "apply_patch", "ns__inner", "ghost"]
ANTHROPIC_NAMES = ["Bash", "ghost"]


class Bridge:
    def __init__(
        self,
        request: JSON,
        factory: Callable[..., Any],
        check_stream: Callable[..., list[JSON]],
        check_whole: Callable[[object], JSON],
        *,
        loop_in_stream: bool,
    ) -> None:
        self.request = request
        self.factory = factory
        self.check_stream = check_stream
        self.check_whole = check_whole
        self.loop_in_stream = loop_in_stream

    def run(self, rounds: list[list[bytes]], *, stream: bool, constant: bool = False) -> Outcome:
        """`constant`: every draw of randomness gives the same bytes, so two runs compare
        whatever order the draws came in (each run's own ids are then alike)."""
        body = {**self.request, "stream": stream}
        entropy = same_entropy if constant else counter_entropy()
        exchange = self.factory(body, b"", RouteRules(), entropy)
        return play(exchange, rounds, stream=stream, loop_in_stream=self.loop_in_stream)


RESPONSES = Bridge(
    RESPONSES_REQUEST,
    new_responses_over_chat,
    check_responses_stream,
    check_response_object,
    loop_in_stream=False,
)
ANTHROPIC = Bridge(
    ANTHROPIC_REQUEST,
    new_anthropic_over_chat,
    check_anthropic_stream,
    check_anthropic_message,
    loop_in_stream=True,
)


def check_streamed(bridge: Bridge, outcome: Outcome, *, complete: bool = True) -> None:
    """The client got its grammar, or (a loop before any byte, where the surface answers
    it with an HTTP error) nothing at all. `complete`: the upstream's body was not cut, so
    every call's arguments are whole."""
    if outcome.http_error is not None:
        assert not bridge.loop_in_stream, "Anthropic streams tell a loop in the stream"
        assert outcome.client == b"", "an HTTP error after bytes went out"
        return
    bridge.check_stream(outcome.client, complete=complete)


def stream_rounds(plan: Plan, damage: Damage, cuts: list[int], repeat: int) -> list[list[bytes]]:
    """The damaged stream, in these reads, for the first round and `repeat` follow-ups (an
    upstream that replays again in its follow-up trips the breaker)."""
    reads = split(corrupt(stream_events(plan), damage), cuts)
    return [reads] * (1 + repeat)


rounds_given = st.integers(0, 3)
read_cuts = st.lists(st.integers(0, 4000), max_size=12)


# -- streams ----------------------------------------------------------------------------------


@SETTINGS
@given(plans(RESPONSES_NAMES), damages, read_cuts, rounds_given)
def test_responses_streams_keep_the_grammar_for_any_split(
    plan: Plan, damage: Damage, cuts: list[int], repeat: int
) -> None:
    _streams_keep_the_grammar(RESPONSES, plan, damage, cuts, repeat)


@SETTINGS
@given(plans(ANTHROPIC_NAMES), damages, read_cuts, rounds_given)
def test_anthropic_streams_keep_the_grammar_for_any_split(
    plan: Plan, damage: Damage, cuts: list[int], repeat: int
) -> None:
    _streams_keep_the_grammar(ANTHROPIC, plan, damage, cuts, repeat)


def _streams_keep_the_grammar(
    bridge: Bridge, plan: Plan, damage: Damage, cuts: list[int], repeat: int
) -> None:
    outcome = bridge.run(stream_rounds(plan, damage, cuts, repeat), stream=True)
    check_streamed(bridge, outcome, complete=damage.cut is None)
    whole = bridge.run(stream_rounds(plan, damage, [], repeat), stream=True, constant=True)
    pieces = bridge.run(stream_rounds(plan, damage, cuts, repeat), stream=True, constant=True)
    assert pieces.client == whole.client, "another split of the same body, other client bytes"
    assert type(pieces.http_error) is type(whole.http_error)


@SETTINGS
@given(plans(RESPONSES_NAMES), read_cuts)
def test_responses_every_byte_split_of_an_undamaged_stream(plan: Plan, cuts: list[int]) -> None:
    """Undamaged, split into one-byte reads too: the same bytes, and the response completes
    (or is incomplete, for a cut-off finish)."""
    body = b"".join(stream_events(plan))
    whole = RESPONSES.run([[body]], stream=True)
    check_streamed(RESPONSES, whole)
    once = RESPONSES.run([[body]], stream=True, constant=True)
    bytewise = RESPONSES.run(
        [[body[n : n + 1] for n in range(len(body))]], stream=True, constant=True
    )
    assert bytewise.client == once.client
    if whole.http_error is None:
        terminal = check_responses_stream(whole.client)[-1]["type"]
        assert terminal in ("response.completed", "response.incomplete", "response.failed")


# -- whole answers -------------------------------------------------------------------------------


@SETTINGS
@given(plans(RESPONSES_NAMES), st.none() | st.integers(0, 600), rounds_given)
def test_responses_whole_answers_are_response_objects(
    plan: Plan, cut: int | None, repeat: int
) -> None:
    _whole_answers(RESPONSES, plan, cut, repeat)


@SETTINGS
@given(plans(ANTHROPIC_NAMES), st.none() | st.integers(0, 600), rounds_given)
def test_anthropic_whole_answers_are_messages(plan: Plan, cut: int | None, repeat: int) -> None:
    _whole_answers(ANTHROPIC, plan, cut, repeat)


def _whole_answers(bridge: Bridge, plan: Plan, cut: int | None, repeat: int) -> None:
    body = completion_bytes(plan)
    body = body if cut is None else body[:cut]
    outcome = bridge.run([[body]] * (1 + repeat), stream=False)
    if outcome.http_error is not None:
        assert isinstance(outcome.http_error, ProxyError)
        assert outcome.client == b""
        return
    answer = orjson.loads(outcome.client)
    if "error" in answer and "choices" not in answer and bridge is RESPONSES:
        return  # an OpenAI error body in a 2xx answer goes out as it is
    bridge.check_whole(answer)
    assert cut is None or cut >= len(completion_bytes(plan)), "a cut body became an answer"


def canonical(plan: Plan) -> Plan:
    """The plan in the order a whole message lists its parts (reasoning, text, calls), so
    that a stream and a completion say the same thing."""
    order = {"reasoning": 0, "content": 1, "call": 2}
    pieces = sorted((p for p in plan.pieces if p[0] in order), key=lambda p: order[p[0]])
    # No replays of the history's call: a stream's replay-only round loses the text the
    # Chat exchange held back ("<", whitespace) where a whole answer keeps it (reported).
    pieces = [p for p in pieces if p[0] != "call" or p[1].arguments != '{"cmd":"ls"}']
    # Calls at their own index: a stream that puts a call without an id at a used index
    # continues that call (SPEC §4), which a completion cannot say.
    dense = [(k, replace(v, index_style="dense") if k == "call" else v) for k, v in pieces]
    return Plan(tuple(dense), plan.finish, plan.usage)


def calls_as_a_set(parts: list[Any]) -> tuple[list[Any], list[Any]]:
    """What is not a call in order, and the calls sorted: a call held as a possible replay
    reaches a stream's client after a later one (SPEC §4), a completion lists it in place."""
    calls = [p for p in parts if p[0] in ("function_call", "custom_tool_call", "tool_use")]
    return [p for p in parts if p not in calls], sorted(calls, key=repr)


@SETTINGS
@given(plans(RESPONSES_NAMES).map(canonical))
def test_responses_stream_and_whole_answer_hold_the_same_items(plan: Plan) -> None:
    """The streamed response's final `output` and the whole response list the same items
    (kinds, texts, call names and arguments) for the same upstream content."""
    streamed = RESPONSES.run([[b"".join(stream_events(plan))]], stream=True)
    whole = RESPONSES.run([[completion_bytes(plan)]], stream=False)
    if whole.http_error is not None or streamed.http_error is not None:
        return  # a loop: before the first byte an HTTP error, after it response.failed
    final = check_responses_stream(streamed.client)[-1]["response"]
    if final["status"] == "failed":
        return
    streamed_items = calls_as_a_set(_items(final["output"]))
    assert streamed_items == calls_as_a_set(_items(orjson.loads(whole.client)["output"]))


@SETTINGS
@given(plans(ANTHROPIC_NAMES).map(canonical))
def test_anthropic_stream_and_whole_answer_hold_the_same_blocks(plan: Plan) -> None:
    streamed = ANTHROPIC.run([[b"".join(stream_events(plan))]], stream=True)
    whole = ANTHROPIC.run([[completion_bytes(plan)]], stream=False)
    if whole.http_error is not None or streamed.http_error is not None:
        return
    events = check_anthropic_stream(streamed.client)
    if events[-1]["type"] == "error":
        return
    message = orjson.loads(whole.client)
    assert calls_as_a_set(_blocks(events)) == calls_as_a_set(_whole_blocks(message))
    stop = next(e for e in events if e["type"] == "message_delta")["delta"]["stop_reason"]
    assert stop == message["stop_reason"]


def _items(output: list[JSON]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for item in output:
        if item["type"] == "message":
            parts = tuple(
                (p["type"], _words(p.get("text", p.get("refusal")))) for p in item["content"]
            )
            out.append(("message", parts))
        elif item["type"] == "reasoning":
            out.append(("reasoning", item["encrypted_content"]))
        else:
            payload = item.get("arguments", item.get("input"))
            out.append((item["type"], item["name"], item.get("namespace"), payload))
    return out


def _words(text: str) -> str:
    """Text without its whitespace: a round whose only calls are replays loses its
    whitespace-only text in a stream (the Chat exchange holds it back) but not whole."""
    return "".join(text.split())


def _blocks(events: list[JSON]) -> list[tuple[str, str]]:
    """Each streamed block's kind and its whole text, thinking or input."""
    blocks: dict[int, list[str]] = {}
    kinds: dict[int, str] = {}
    for event in events:
        if event["type"] == "content_block_start":
            kinds[event["index"]] = event["content_block"]["type"]
            blocks[event["index"]] = []
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            value = delta.get("text", delta.get("thinking", delta.get("partial_json")))
            if value is not None:
                blocks[event["index"]].append(value)
    out = []
    for index in sorted(blocks):
        value = "".join(blocks[index])
        if kinds[index] == "tool_use":
            value = orjson.dumps(orjson.loads(value or "{}"), option=orjson.OPT_SORT_KEYS).decode()
        else:
            value = _words(value)
        out.append((kinds[index], value))
    return [block for block in out if block != ("text", "")]


def _whole_blocks(message: JSON) -> list[tuple[str, str]]:
    out = []
    for block in message["content"]:
        if block["type"] == "tool_use":
            value = orjson.dumps(block["input"], option=orjson.OPT_SORT_KEYS).decode()
        else:
            value = _words(block.get("text", block.get("thinking", "")))
        out.append((block["type"], value))
    return [block for block in out if block != ("text", "")]
