"""Hypothesis strategies for client request bodies: Responses and Anthropic Messages, valid,
near-valid and garbage (wrong types, nulls, huge values, wrong nesting, unknown item and
block kinds, calls and results in odd orders or unpaired, ids of every shape, reasoning with
the proxy's own, foreign or damaged signatures)."""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import strategies as st

from proxy.bridge.anthropic_chat.reasoning import sign_reasoning
from proxy.bridge.responses_chat.reasoning import seal

JSON = dict[str, Any]
PREFIX = "tcp-reasoning-v1:"

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
# Any JSON value, nested a little.
garbage = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
huge = st.sampled_from(["x" * 20_000, "é" * 5_000, 10**30, -(10**30), 1e308])
deep = st.integers(10, 200).map(lambda n: _nest(n))


def _nest(depth: int) -> object:
    value: object = "bottom"
    for n in range(depth):
        value = [value] if n % 2 else {"k": value}
    return value


def sometimes(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the valid shape, sometimes garbage, huge or deeply nested."""
    return st.one_of(*[valid] * 8, garbage, huge, deep)


# Ids of every shape: native, counter-shaped, Kimi's, each surface's prefix, empty, blank,
# over-long, non-ASCII, numbers, null.
ID_POOL = [
    "call_abc123",
    "call_0",
    "call_1",
    "functions.shell:0",
    "functions.shell:1",
    "shell:0",
    "toolu_01ABC",
    "toolu_abc123",
    "toolu_",
    "call_",
    "0",
    "7",
    "",
    " ",
    "null",
    "x" * 70,
    "id with spaces",
    "идентификатор",
    "call_1_0_deadbeef",
    "toolu_1_0_deadbeef",
]
ids = st.one_of(st.sampled_from(ID_POOL), st.sampled_from(ID_POOL), text, st.integers(0, 99))
maybe_ids = st.one_of(ids, ids, st.none(), garbage)

TOOL_NAMES = ["shell", "apply_patch", "read", "Bash", "ns__inner", ""]
names = st.one_of(st.sampled_from(TOOL_NAMES), st.sampled_from(TOOL_NAMES), text)
arguments_text = st.one_of(
    st.sampled_from(['{"cmd":"ls"}', "{}", "", "{", "[1,2]", "null", '{"a":{"b":[1]}}']), text
)


def signed(sign: Any) -> st.SearchStrategy[Any]:
    """A reasoning signature: the proxy's own, truncated, foreign, not base64, invalid UTF-8,
    or any value."""
    return st.one_of(
        text.map(sign),
        text.map(sign).map(lambda s: s[: max(len(PREFIX), len(s) - 3)]),
        st.just(PREFIX),
        st.just(PREFIX + "!!!not base64"),
        st.just(PREFIX + base64.b64encode(b"\xff\xfe").decode()),
        st.sampled_from(["EqQBCkYIBxgCKkB...", "gAAAAABo-encrypted", ""]),
        garbage,
    )


# -- Responses ---------------------------------------------------------------------------------

responses_parts = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(["input_text", "output_text", "text"]),
                "text": sometimes(text),
            }
        ),
        st.fixed_dictionaries({"type": st.just("refusal"), "refusal": sometimes(text)}),
        st.fixed_dictionaries(
            {"type": st.just("input_image")},
            optional={
                "image_url": sometimes(st.just("data:image/png;base64,iVBORw0KGgo=")),
                "file_id": text,
                "detail": sometimes(st.sampled_from(["auto", "low", "high"])),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("input_file")},
            optional={
                "file_data": sometimes(st.just("data:application/pdf;base64,JVBERi0=")),
                "file_url": text,
                "file_id": text,
                "filename": sometimes(text),
            },
        ),
        st.fixed_dictionaries({"type": sometimes(text)}, optional={"text": garbage}),
        garbage,
    ),
    max_size=4,
)
responses_content = st.one_of(text, responses_parts, responses_parts, garbage)

responses_item = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("message"),
            "role": sometimes(st.sampled_from(["user", "assistant", "system", "developer"])),
            "content": responses_content,
        }
    ),
    st.fixed_dictionaries(  # a message without `type`, as Chat-minded clients send it
        {"role": st.sampled_from(["user", "assistant", "system"]), "content": responses_content}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "call_id": maybe_ids,
            "name": sometimes(names),
            "arguments": st.one_of(arguments_text, garbage),
        },
        optional={"id": maybe_ids, "namespace": sometimes(st.just("ns")), "status": text},
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("custom_tool_call"),
            "call_id": maybe_ids,
            "name": sometimes(names),
            "input": sometimes(text),
        },
        optional={"id": maybe_ids},
    ),
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["function_call_output", "custom_tool_call_output"]),
            "call_id": maybe_ids,
            "output": st.one_of(text, responses_parts, garbage),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("reasoning")},
        optional={
            "encrypted_content": signed(seal),
            "summary": garbage,
            "content": garbage,
            "id": maybe_ids,
        },
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["web_search_call", "compaction", "local_shell_call", "bogus"])},
        optional={"id": maybe_ids, "status": text},
    ),
    garbage,
)


def _flat(lists: list[list[JSON]]) -> list[JSON]:
    return [x for part in lists for x in part]


def _paired_turn(call_id: str) -> list[JSON]:
    """A well-formed call and its output, so that valid histories are common."""
    call = {"type": "function_call", "call_id": call_id, "name": "shell", "arguments": "{}"}
    return [call, {"type": "function_call_output", "call_id": call_id, "output": "ok"}]


responses_input = st.one_of(
    text,
    st.lists(st.sampled_from(ID_POOL[:8]).map(_paired_turn), max_size=3).map(_flat),
    st.lists(
        st.one_of(responses_item, st.sampled_from(ID_POOL[:6]).map(_paired_turn)),
        max_size=8,
    ).map(
        lambda items: [x for item in items for x in (item if isinstance(item, list) else [item])]
    ),
    garbage,
)

responses_tool = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("function"), "name": sometimes(names)},
        optional={
            "description": sometimes(text),
            "parameters": sometimes(st.just({"type": "object", "properties": {}})),
            "strict": sometimes(st.booleans()),
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("custom"), "name": sometimes(names)},
        optional={
            "description": sometimes(text),
            "format": sometimes(
                st.just({"type": "grammar", "syntax": "lark", "definition": "start: x"})
            ),
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("namespace"), "name": sometimes(st.just("ns"))},
        optional={
            "tools": st.lists(
                st.fixed_dictionaries({"type": st.just("function"), "name": names}), max_size=2
            )
        },
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["web_search", "file_search", "mcp"])}),
    garbage,
)

RESPONSES_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": sometimes(st.sampled_from(["kimi-k2", "gpt-5", "moonshot-v1"])),
    "input": responses_input,
    "instructions": sometimes(text),
    "tools": sometimes(st.lists(responses_tool, max_size=4)),
    "tool_choice": sometimes(
        st.one_of(
            st.sampled_from(["auto", "none", "required"]),
            st.fixed_dictionaries({"type": st.just("function"), "name": names}),
            st.fixed_dictionaries(
                {"type": st.just("allowed_tools"), "mode": st.sampled_from(["auto", "required"])}
            ),
        )
    ),
    "parallel_tool_calls": sometimes(st.booleans()),
    "max_output_tokens": sometimes(st.integers(1, 10**6)),
    "temperature": sometimes(st.floats(0, 2)),
    "top_p": sometimes(st.floats(0, 1)),
    "user": sometimes(text),
    "reasoning": sometimes(
        st.fixed_dictionaries(
            {}, optional={"effort": st.sampled_from(["low", "high"]), "summary": text}
        )
    ),
    "text": sometimes(
        st.fixed_dictionaries(
            {},
            optional={
                "format": st.one_of(
                    st.just({"type": "text"}),
                    st.just({"type": "json_schema", "name": "x", "schema": {}}),
                    garbage,
                ),
                "verbosity": text,
            },
        )
    ),
    "stream": sometimes(st.booleans()),
    "store": sometimes(st.booleans()),
    "include": sometimes(st.lists(st.sampled_from(["reasoning.encrypted_content", "x"]))),
    "metadata": garbage,
    "prompt_cache_key": text,
    "truncation": st.sampled_from(["disabled", "auto"]),
    "previous_response_id": st.sampled_from([None] * 8 + ["", "resp_1"]),
    "conversation": st.sampled_from([None] * 9 + ["conv_1"]),
    "background": st.sampled_from([False] * 8 + [None, True]),
    "unknown_field": garbage,
}


@st.composite
def responses_bodies(draw: st.DrawFn) -> JSON:
    """A Responses body: each field present or not, near-valid or garbage."""
    keys = draw(st.sets(st.sampled_from(sorted(RESPONSES_FIELDS)), max_size=len(RESPONSES_FIELDS)))
    body: JSON = {}
    if draw(st.booleans()):  # usually there is an input
        keys.add("input")
    for key in sorted(keys):
        body[key] = draw(RESPONSES_FIELDS[key])
    return body


# -- Anthropic Messages --------------------------------------------------------------------------

image_source = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("base64"),
            "media_type": sometimes(st.just("image/png")),
            "data": sometimes(st.just("iVBORw0KGgo=")),
        }
    ),
    st.fixed_dictionaries({"type": st.just("url"), "url": sometimes(st.just("https://x/y.png"))}),
    st.fixed_dictionaries({"type": st.just("file"), "file_id": text}),
    garbage,
)
document_source = st.one_of(
    image_source,
    st.fixed_dictionaries({"type": st.just("text"), "data": sometimes(text)}),
    st.fixed_dictionaries({"type": st.just("content"), "content": st.one_of(text, garbage)}),
)


def _anthropic_blocks(nested: st.SearchStrategy[Any]) -> st.SearchStrategy[JSON]:
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("text"), "text": sometimes(text)},
            optional={"cache_control": st.just({"type": "ephemeral"}), "citations": garbage},
        ),
        st.fixed_dictionaries({"type": st.just("image"), "source": image_source}),
        st.fixed_dictionaries(
            {"type": st.just("document"), "source": document_source},
            optional={"title": sometimes(text), "citations": garbage},
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("tool_use"),
                "id": maybe_ids,
                "name": sometimes(names),
                "input": st.one_of(st.just({"command": "ls"}), st.just({}), garbage),
            }
        ),
        st.fixed_dictionaries(
            {"type": st.just("tool_result"), "tool_use_id": maybe_ids},
            optional={"content": nested, "is_error": sometimes(st.booleans())},
        ),
        st.fixed_dictionaries(
            {"type": st.just("thinking")},
            optional={"thinking": sometimes(text), "signature": signed(sign_reasoning)},
        ),
        st.fixed_dictionaries({"type": st.just("redacted_thinking"), "data": text}),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["server_tool_use", "web_search_tool_result", "bogus"])},
            optional={"id": maybe_ids},
        ),
        st.fixed_dictionaries({}, optional={"type": garbage, "text": garbage}),
    )


inner_content = st.one_of(text, text, st.lists(_anthropic_blocks(garbage), max_size=3), garbage)
anthropic_block = _anthropic_blocks(inner_content)
anthropic_content = st.one_of(text, *[st.lists(anthropic_block, max_size=5)] * 4, garbage)

anthropic_message = st.one_of(
    *[
        st.fixed_dictionaries(
            {
                "role": sometimes(st.sampled_from(["user", "assistant", "user", "system"])),
                "content": anthropic_content,
            }
        )
    ]
    * 8,
    garbage,
)


def _anthropic_pair(tool_id: str) -> list[JSON]:
    use = {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": "ls"}}
    result = {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}
    return [
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
    ]


anthropic_messages = st.one_of(
    st.lists(
        st.one_of(
            anthropic_message,
            anthropic_message,
            st.sampled_from(ID_POOL[:8]).map(_anthropic_pair),
        ),
        max_size=8,
    ).map(lambda ms: [x for m in ms for x in (m if isinstance(m, list) else [m])]),
    *[st.lists(st.sampled_from(ID_POOL[:8]).map(_anthropic_pair), max_size=3).map(_flat)] * 3,
    st.lists(anthropic_message, max_size=4),
    garbage,
)

anthropic_tool = st.fixed_dictionaries(
    {"name": sometimes(names)},
    optional={
        "type": st.sampled_from(["custom", "web_search_20250305", "bash_20250124"]),
        "description": sometimes(text),
        "input_schema": sometimes(st.just({"type": "object", "properties": {}})),
        "cache_control": st.just({"type": "ephemeral"}),
        "strict": st.booleans(),
    },
)

ANTHROPIC_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": sometimes(st.sampled_from(["kimi-k2", "claude-sonnet-4", "moonshot-v1"])),
    "messages": anthropic_messages,
    "system": st.one_of(text, st.lists(anthropic_block, max_size=3), garbage, st.just([])),
    "tools": sometimes(st.lists(st.one_of(*[anthropic_tool] * 5, garbage), max_size=4)),
    "tool_choice": sometimes(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["auto", "any", "tool", "none", "bogus"])},
            optional={"name": names, "disable_parallel_tool_use": sometimes(st.booleans())},
        )
    ),
    "max_tokens": sometimes(st.integers(1, 10**6)),
    "temperature": sometimes(st.floats(0, 1)),
    "top_p": sometimes(st.floats(0, 1)),
    "top_k": garbage,
    "stop_sequences": sometimes(st.lists(text, max_size=3)),
    "metadata": sometimes(st.fixed_dictionaries({}, optional={"user_id": text, "other": text})),
    "stream": sometimes(st.booleans()),
    "thinking": garbage,
    "context_management": garbage,
    "unknown_field": garbage,
}


@st.composite
def anthropic_bodies(draw: st.DrawFn) -> JSON:
    keys = draw(st.sets(st.sampled_from(sorted(ANTHROPIC_FIELDS)), max_size=len(ANTHROPIC_FIELDS)))
    if draw(st.integers(0, 4)):  # usually there are messages
        keys.add("messages")
    return {key: draw(ANTHROPIC_FIELDS[key]) for key in sorted(keys)}
