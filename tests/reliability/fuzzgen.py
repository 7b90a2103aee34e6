"""Hypothesis strategies for upstream streams, completions and histories that misbehave in
every way we know of and many we do not: random shapes inside `tool_calls`, odd id types,
arguments split anywhere or sent as objects, garbage data lines, comments, every SSE line end,
reads split at any byte. Values come from small pools so that ids collide, calls replay
history calls and fragments concatenate into JSON often enough to reach the deep states.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import strategies as st

NAMES = ["run_shell_command", "read_file", "", "x", None, 7]
HISTORY_IDS = ["call_0", "functions.run_shell_command:0", "0", "abcDEF123456", "call_1_0_00000000"]
RAW_IDS: list[Any] = [
    *HISTORY_IDS,
    None,
    "",
    " ",
    "null",
    0,
    1,
    True,
    1.0,
    2.5,
    [],
    {},
    "functions.read_file:1",
    "read_file_1",
    "call_79382389",
    "x" * 41,
    "é-id",
]
FRAGMENTS = [
    "",
    "{",
    "}",
    '{"command":',
    '"ls"',
    '"ls"}',
    '{"command":"ls"}',
    '{"command": "ls"}',
    "{}",
    "null",
    "[1,2]",
    "not json",
    '{"a":{"b":[1,2,{"c":null}]}}',
    "\u2028",
    " ",
]
TEXT = [
    "",
    "Let me ",
    "run that… ✓",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>functions.run_shell_command:0<|tool_call_argument_begin|>",
    '{"command":"ls"}',
    "<|tool_call_end|><|tool_calls_section_end|>",
    '<tool_call>{"name": "read_file", "arguments": {"path": "a"}}</tool_call>',
    "<tool_call>",
    "data: [DONE]",
]
FINISH = [None, None, "stop", "tool_calls", "length", "eos", "function_call", "weird", 5, ""]


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)


@dataclass(frozen=True, slots=True)
class Deep:
    """A value nested `depth` levels: past what orjson serializes (254) but within what it
    parses (1024). Kept symbolic until encoded, so hypothesis can print and shrink it."""

    depth: int
    shape: str
    leaf: Any


# Drawing a recursive JSON strategy at every spot would spend the whole time budget in
# hypothesis itself: most odd values come from this pool, a few spots draw freely.
ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**70,
    1.5,
    1e300,
    "",
    "x",
    "é\u2028",
    [],
    {},
    [1, "a", None],
    {"a": {"b": [None, {"c": "d"}]}},
    {"command": "ls"},
    Deep(260, "list", 1),
    Deep(1000, "mixed", "x"),
]
json_value = st.one_of(
    st.sampled_from(ODD_VALUES),
    st.recursive(
        json_leaf,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(st.text(max_size=5), children, max_size=3),
        ),
        max_leaves=6,
    ),
)
odd_json = st.sampled_from(ODD_VALUES)
deep_value = st.builds(
    Deep,
    depth=st.sampled_from([250, 260, 600, 1000]),
    shape=st.sampled_from(["list", "dict", "mixed"]),
    leaf=json_leaf,
)

arguments = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.sampled_from(FRAGMENTS),
    st.none(),
    odd_json,
)
index_value = st.one_of(
    st.integers(min_value=0, max_value=3),
    st.integers(min_value=0, max_value=3),
    st.sampled_from([None, -1, "0", 2**70, True, 1.0]),
)
function_field = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from(NAMES),
            "arguments": arguments,
            "extra": odd_json,
        },
    ),
    st.fixed_dictionaries({"name": st.sampled_from(NAMES), "arguments": arguments}),
    st.sampled_from([None, "run", [], 3]),
)
tool_call_delta = st.one_of(
    st.fixed_dictionaries(
        {"index": index_value, "function": function_field},
        optional={
            "id": st.sampled_from(RAW_IDS),
            "type": st.sampled_from(["function", "fn", None]),
            "unknown": odd_json,
        },
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "index": index_value,
            "id": st.sampled_from(RAW_IDS),
            "function": function_field,
        },
    ),
    json_value,
)
tool_calls_field = st.one_of(
    st.lists(tool_call_delta, min_size=1, max_size=3),
    st.lists(tool_call_delta, min_size=1, max_size=3),
    tool_call_delta,
    st.sampled_from([None, [], "calls", 0]),
)
delta = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["assistant", None]),
            "content": st.one_of(st.sampled_from(TEXT), st.none()),
            "reasoning_content": st.sampled_from(TEXT),
            "tool_calls": tool_calls_field,
        },
    ),
    st.fixed_dictionaries({"tool_calls": tool_calls_field}),
    st.sampled_from([None, "x", [], 1]),
)
choice = st.one_of(
    st.fixed_dictionaries(
        {"finish_reason": st.sampled_from(FINISH)},
        optional={
            "index": st.sampled_from([0, 0, 1, None, "0", True]),
            "delta": delta,
            "logprobs": odd_json,
        },
    ),
    st.fixed_dictionaries(
        {"index": st.just(0), "delta": delta, "finish_reason": st.sampled_from(FINISH)}
    ),
    json_value,
)
ENVELOPE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
chunk = st.one_of(
    st.fixed_dictionaries(
        {"choices": st.lists(choice, max_size=2)},
        optional={"usage": odd_json, "unknown": odd_json},
    ).map(lambda c: {**ENVELOPE, **c}),
    st.fixed_dictionaries({"choices": st.lists(choice, max_size=2)}, optional={"usage": odd_json}),
    st.fixed_dictionaries(
        {
            "choices": st.sampled_from([None, "x", {}, []]),
            "usage": st.one_of(json_value, deep_value),
        }
    ).map(lambda c: {**ENVELOPE, **c}),
    odd_json,  # not an object at all
)


class _Text(str):
    """Already-encoded JSON text on the encoder's stack."""


def encode_json(value: Any) -> bytes:
    """JSON text for any value, iteratively: integers past 64 bits and nesting past what orjson
    (or the recursive stdlib encoder) writes are exactly what a broken upstream may send."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            out.append(item)
        elif isinstance(item, Deep):
            opens = [
                "[" if item.shape == "list" or (item.shape == "mixed" and n % 2 == 0) else '{"k":'
                for n in range(item.depth)
            ]
            closes = ["]" if o == "[" else "}" for o in reversed(opens)]
            stack += [_Text("".join(closes)), item.leaf, _Text("".join(opens))]
        elif isinstance(item, dict):
            parts: list[Any] = [_Text("{")]
            for n, (key, child) in enumerate(item.items()):
                parts += [_Text(("," if n else "") + json.dumps(key, ensure_ascii=False) + ":")]
                parts.append(child)
            stack.extend(reversed([*parts, _Text("}")]))
        elif isinstance(item, list):
            parts = [_Text("[")]
            for n, child in enumerate(item):
                parts += [_Text(","), child] if n else [child]
            stack.extend(reversed([*parts, _Text("]")]))
        else:
            out.append(json.dumps(item, ensure_ascii=False))
    return "".join(out).encode("utf-8", "surrogatepass")


data_payload = st.one_of(
    chunk.map(encode_json),
    chunk.map(encode_json),
    chunk.map(encode_json),
    st.sampled_from([b"not json", b"[DONE]", b" [DONE] ", b"", b"{", b"null"]),
    st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")),
)
data_line = st.builds(
    bytes.__add__, st.sampled_from([b"data: ", b"data: ", b"data:"]), data_payload
)
event_lines = st.one_of(
    data_line.map(lambda line: [line]),
    data_line.map(lambda line: [line]),
    data_line.map(lambda line: [line]),
    st.just([b": keep-alive"]),
    st.tuples(st.sampled_from([b"event: message", b"event: error", b"event: ping"]), data_line),
    st.lists(data_line, min_size=2, max_size=2),
    st.sampled_from([[b"id: 7"], [b"retry: 10"], [b"garbage line"], [b"data"]]),
)
# One upstream event in any of the framings SPEC §4 tolerates.
sse_event = st.builds(
    lambda eol, lines: eol.join(lines) + eol + eol,
    st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"]),
    event_lines,
)


@st.composite
def upstream_stream(draw: st.DrawFn) -> list[bytes]:
    """A whole upstream body, cut into the reads the shell will see."""
    events = draw(st.lists(sse_event, max_size=10))
    if draw(st.booleans()):
        events.append(b"data: [DONE]\n\n")
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        events.append(draw(st.binary(max_size=30)))  # trailing junk without a blank line
    body = b"".join(events)
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=8)))
    pieces, start = [], 0
    for cut in cuts:
        pieces.append(body[start:cut])
        start = cut
    pieces.append(body[start:])
    return pieces


# -- histories (request direction) ---------------------------------------------------------

history_call = st.one_of(
    st.fixed_dictionaries(
        {"function": function_field},
        optional={"id": st.sampled_from(RAW_IDS), "type": st.sampled_from(["function", None])},
    ),
    st.fixed_dictionaries(
        {
            "id": st.sampled_from(HISTORY_IDS),
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.sampled_from(NAMES[:2]), "arguments": st.sampled_from(FRAGMENTS)}
            ),
        }
    ),
    json_value,
)
history_calls = st.one_of(
    st.lists(history_call, max_size=3),
    st.lists(history_call, min_size=1, max_size=3),
    st.sampled_from([None, "calls", {}, 0]),
    history_call,
)
message = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": st.sampled_from(TEXT)}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "tool_calls": history_calls},
        optional={"content": st.one_of(st.none(), st.sampled_from(TEXT))},
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "tool_calls": history_calls},
        optional={"content": st.one_of(st.none(), st.sampled_from(TEXT))},
    ),
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["tool", "tool", "function", 3]),
            "tool_call_id": st.one_of(st.sampled_from(RAW_IDS), json_value),
        }
    ),
    json_value,
)
TOOLS = [
    {"type": "function", "function": {"name": "run_shell_command"}},
    {"type": "function", "function": {"name": "read_file"}},
]
request_body = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["kimi-k2", "gpt-4o", "mistral", 5, None]),
        "messages": st.lists(message, max_size=8),
    },
    optional={
        "n": st.sampled_from([1, 2, 0, -1, None, "2", True]),
        "tools": st.one_of(st.just(TOOLS), json_value),
        "extra": odd_json,
    },
)
completion_message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.just("assistant")},
        optional={
            "content": st.one_of(st.none(), st.sampled_from(TEXT)),
            "tool_calls": st.one_of(history_calls, st.lists(history_call, max_size=4)),
        },
    ),
    json_value,
)
completion_choice = st.one_of(
    st.fixed_dictionaries(
        {"message": completion_message, "finish_reason": st.sampled_from(FINISH)},
        optional={"index": st.sampled_from([0, 1, None, "0", 7])},
    ),
    json_value,
)
completion = st.fixed_dictionaries(
    {
        "id": st.just("chatcmpl-1"),
        "object": st.just("chat.completion"),
        "choices": st.lists(completion_choice, max_size=2),
    },
    optional={"usage": odd_json, "unknown": odd_json},
)


def materialize(value: Any) -> Any:
    """What a JSON parser makes of the generated value (Deep markers expanded)."""
    return orjson.loads(encode_json(value))
