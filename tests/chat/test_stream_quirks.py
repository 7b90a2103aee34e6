"""Golden table: one case per QUIRKS.md line about streams (SPEC §2, §4).

Each case is an upstream stream and the exact result a client sees: the tool calls it
reassembles by concatenating string fields (ids, names, arguments), the finish_reason and the
content. Every case is replayed whole, one byte at a time and at every split point, and the
client's events must be identical each time (hex8 is fixed, so ids are too). On top of the
expected result, every case must satisfy SPEC §4's shape rules (one header per call, bare
argument fragments after it, dense indexes from 0, `[DONE]` last).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from openai.lib.streaming._deltas import accumulate_delta

from tests.chat.helpers import (
    MISSING,
    Event,
    Setup,
    assert_well_formed,
    call_summary,
    calls,
    chunk,
    chunks_of,
    content_of,
    feed_reads,
    finish,
    finish_reasons,
    frag,
    header,
    minted,
    parse_sse,
    request,
    role,
    run,
    sse,
    text,
    tool,
    usage_chunk,
)

OPENAI_ID = "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs"  # call_ + 24 base62
OTHER_ID = "call_Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2"
ARGS = '{"path":"src/main.py"}'
ARGS2 = '{"pattern":"TODO","path":"."}'


@dataclass
class Case:
    name: str
    quirk: str  # the QUIRKS.md line this case stands for
    upstream: bytes
    calls: list[tuple[str, str, str]]  # (client id, name, arguments) per reassembled call
    finish: str = "tool_calls"
    content: str = ""
    setup: Setup = field(default_factory=Setup)
    check: Callable[[list[Event]], None] | None = None


def split_args(index: Any, arguments: str, *cuts: int) -> list[dict[str, Any]]:
    """Argument fragments of one call, cut at the given offsets."""
    bounds = [0, *cuts, len(arguments)]
    return [frag(index, arguments[a:b]) for a, b in itertools.pairwise(bounds)]


def one_per_chunk(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [calls(item) for item in items]


def reference_call(index: int, id: Any, name: str, args: str) -> list[dict[str, Any]]:
    return one_per_chunk([header(index, id, name), *split_args(index, args, 1, 8)])


CASES: list[Case] = []


def case(*args: Any, **kwargs: Any) -> None:
    CASES.append(Case(*args, **kwargs))


# -- the reference shape ---------------------------------------------------------------------


def _usage_passes(events: list[Event]) -> None:
    last_chunk = chunks_of(events)[-1]
    assert last_chunk["choices"] == []
    assert last_chunk["usage"]["total_tokens"] == 15


case(
    "openai_reference",
    "reference: header, fragments, finish in its own chunk, usage chunk, [DONE]",
    sse(
        role(),
        *reference_call(0, OPENAI_ID, "read_file", ARGS),
        finish("tool_calls"),
        usage_chunk(),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
    check=_usage_passes,
)


def _extra_keys_pass(events: list[Event]) -> None:
    for body in chunks_of(events):
        assert body["obfuscation"] == "x7Yz"
        assert body["service_tier"] == "default"
        assert body["system_fingerprint"] == "fp_1"


EXTRA = {"obfuscation": "x7Yz", "service_tier": "default", "system_fingerprint": "fp_1"}
case(
    "extra_top_level_keys",
    "reference: obfuscation, service_tier, system_fingerprint must pass",
    sse(
        chunk({"role": "assistant", "content": "ok "}, **EXTRA),
        calls(header(0, OPENAI_ID, "read_file", ARGS), **EXTRA),
        finish("tool_calls", **EXTRA),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
    content="ok ",
    check=_extra_keys_pass,
)

# -- ids -------------------------------------------------------------------------------------

case(
    "kimi_functions_name_n",
    "ids: functions.{name}:{n} (vLLM and SGLang serving Kimi)",
    sse(
        role(),
        *reference_call(0, "functions.read_file:0", "read_file", ARGS),
        *reference_call(1, "functions.grep:1", "grep", ARGS2),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "grep", ARGS2)],
)

case(
    "moonshot_name_colon_n",
    "ids: {name}:{n} counted per response (Moonshot hosted, Fireworks Kimi)",
    sse(
        *reference_call(0, "read_file:0", "read_file", ARGS),
        *reference_call(1, "read_file:1", "read_file", ARGS2),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "read_file", ARGS2)],
)

case(
    "name_underscore_n",
    "ids: {name}_{n} counted per response (Kimi K3 stacks)",
    sse(*reference_call(0, "read_file_0", "read_file", ARGS), finish("tool_calls")),
    [(minted(1, 0), "read_file", ARGS)],
)

case(
    "name_colon_n_reused_next_turn",
    "ids: {name}:{n} is the same id every turn (later turn, history holds one)",
    sse(*reference_call(0, "read_file:0", "read_file", ARGS2), finish("tool_calls")),
    [(minted(3, 0), "read_file", ARGS2)],
    setup=Setup(
        body=request(
            [
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "call_1_0_cafecafe",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": ARGS},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1_0_cafecafe", "content": "x"},
                {"role": "assistant", "content": "done"},
                {"role": "user", "content": "b"},
            ]
        )
    ),
)

case(
    "call_0_call_1",
    "ids: call_0, call_1 per response (relays, Grok via gateways)",
    sse(
        *reference_call(0, "call_0", "read_file", ARGS),
        *reference_call(1, "call_1", "grep", ARGS2),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "grep", ARGS2)],
)

case(
    "openrouter_tool_n_name",
    "ids: tool_0_<name> (Gemini via OpenRouter)",
    sse(
        calls(header(0, "tool_0_read_file", "read_file", ARGS)),
        calls(header(1, "tool_1_grep", "grep", ARGS2)),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "grep", ARGS2)],
)

case(
    "sglang_bare_numbers_repeated_all_at_index_0",
    'ids: bare "0", "1" repeated on every delta, all calls at index 0 (older SGLang)',
    sse(
        calls(tool(index=0, id="0", type="function", name="read_file", arguments="")),
        calls(tool(index=0, id="0", arguments='{"path":')),
        calls(tool(index=0, id="0", arguments='"src/main.py"}')),
        calls(tool(index=0, id="1", type="function", name="grep", arguments="")),
        calls(tool(index=0, id="1", arguments='{"pattern":"TODO",')),
        calls(tool(index=0, id="1", arguments='"path":"."}')),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "grep", ARGS2)],
)

case(
    "empty_string_ids",
    'ids: "" (Gemini compat 2025)',
    sse(
        calls(tool(index=0, id="", type="function", name="read_file", arguments=ARGS)),
        calls(tool(index=1, id="", type="function", name="grep", arguments=ARGS2)),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "grep", ARGS2)],
)

case(
    "missing_ids",
    "ids: missing (GLM relays, SiliconFlow)",
    sse(
        calls(tool(index=0, type="function", name="read_file", arguments="")),
        *one_per_chunk(split_args(0, ARGS, 3, 9)),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS)],
)

case(
    "id_only_on_a_later_delta",
    "ids: only on a later delta (some vLLM parsers)",
    sse(
        calls(tool(index=0, type="function", name="read_file", arguments="")),
        calls(tool(index=0, id=OPENAI_ID, arguments='{"path":')),
        calls(frag(0, '"src/main.py"}')),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "id_only_after_the_arguments",
    "ids: only after the arguments (the header cannot wait: a minted id)",
    sse(
        calls(tool(index=0, type="function", name="read_file", arguments="")),
        *one_per_chunk(split_args(0, ARGS, 4)),
        calls(tool(index=0, id=OPENAI_ID)),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS)],
)

case(
    "new_id_on_every_delta",
    "ids: a new id on every delta of one call, the first differs (GLM-4, Poolside)",
    sse(
        calls(header(0, OPENAI_ID, "read_file")),
        calls(tool(index=0, id="call_second0000000000000", arguments='{"path":')),
        calls(tool(index=0, id="call_third00000000000000", arguments='"src/main.py"}')),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "new_counter_id_on_every_delta",
    "ids: a new id on every delta, counter-shaped (the first id decides, rewritten)",
    sse(
        calls(header(0, "0", "read_file")),
        calls(tool(index=0, id="1", arguments='{"path":')),
        calls(tool(index=0, id="2", arguments='"src/main.py"}')),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS)],
)

case(
    "bare_integer_ids",
    "ids: bare integers instead of strings (MiniMax, GLM through routers)",
    sse(
        calls(tool(index=0, id=0, type="function", name="read_file", arguments=ARGS)),
        calls(tool(index=1, id=918273645, type="function", name="grep", arguments=ARGS2)),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), ("918273645", "grep", ARGS2)],
)

case(
    "null_string_on_continuation_deltas",
    'ids: the string "null" on continuation deltas (GLM via Mistral\'s API)',
    sse(
        calls(header(0, OPENAI_ID, "read_file")),
        calls(tool(index=0, id="null", arguments='{"path":')),
        calls(tool(index=0, id="null", arguments='"src/main.py"}')),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "same_id_two_calls_same_args",
    "ids: the same id on two calls of one response, same arguments (one delivered)",
    sse(
        *reference_call(0, "grep:3", "grep", ARGS2),
        *reference_call(1, "grep:3", "grep", ARGS2),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "grep", ARGS2)],
)

case(
    "same_native_id_two_calls_same_args",
    "ids: the same native id twice, same arguments (Workers AI): the later one dropped",
    sse(
        *reference_call(0, OPENAI_ID, "grep", ARGS2),
        *reference_call(1, OPENAI_ID, "grep", '{"path": ".", "pattern": "TODO"}'),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "grep", ARGS2)],
)

case(
    "same_id_two_calls_different_args",
    "ids: the same id on two calls of one response (Kimi coding endpoint, parallel grep:3)",
    sse(
        *reference_call(0, "grep:3", "grep", ARGS2),
        *reference_call(1, "grep:3", "grep", '{"pattern":"FIXME"}'),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "grep", ARGS2), (minted(1, 1), "grep", '{"pattern":"FIXME"}')],
)

case(
    "same_id_two_calls_same_args_interleaved",
    "ids: the same id on two parallel calls whose fragments interleave, same arguments",
    sse(
        calls(header(0, "grep:3", "grep")),
        calls(header(1, "grep:3", "grep")),
        calls(frag(0, '{"pattern":')),
        calls(frag(1, '{"pattern":"TODO","path":"."}')),  # the later call completes first
        calls(frag(0, '"TODO","path":"."}')),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "grep", ARGS2)],
)

case(
    "same_id_two_calls_different_args_interleaved",
    "ids: the same id on two parallel calls whose fragments interleave, different arguments",
    sse(
        calls(header(0, "grep:3", "grep")),
        calls(header(1, "grep:3", "grep")),
        calls(frag(0, '{"pattern":')),
        calls(frag(1, '{"pattern":"FIXME"}')),
        calls(frag(0, '"TODO","path":"."}')),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "grep", ARGS2), (minted(1, 1), "grep", '{"pattern":"FIXME"}')],
)

case(
    "same_native_id_two_calls_different_args",
    "ids: the same native id on two calls, different arguments: both, distinct ids",
    sse(
        *reference_call(0, OPENAI_ID, "grep", ARGS2),
        *reference_call(1, OPENAI_ID, "grep", '{"pattern":"FIXME"}'),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "grep", ARGS2), (minted(1, 1), "grep", '{"pattern":"FIXME"}')],
)

LONG_VLLM = "chatcmpl-tool-" + "0123456789abcdef" * 2
LONG_DEEPSEEK = "call_0_" + "7c3a6a4e-1b8e-4f6c-9d9a-0e2f5b8c1d3e"
LONG_RESPONSES = "fc_" + "68a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3"
case(
    "long_ids_rewritten",
    "ids: 43 to 53 characters (chatcmpl-tool-<32hex>, call_0_<uuid>, fc_...)",
    sse(
        calls(header(0, LONG_VLLM, "read_file", ARGS)),
        calls(header(1, LONG_DEEPSEEK, "grep", ARGS2)),
        calls(header(2, LONG_RESPONSES, "ls", "{}")),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "grep", ARGS2), (minted(1, 2), "ls", "{}")],
)

case(
    "mistral_nine_alnum_kept",
    "ids: 9 random alphanumerics (Mistral)",
    sse(calls(header(0, "aB3dE5gH9", "read_file", ARGS)), finish("tool_calls")),
    [("aB3dE5gH9", "read_file", ARGS)],
)

case(
    "lm_studio_numeric_string_kept",
    'ids: numeric strings like "365174485" (LM Studio)',
    sse(*reference_call(0, "365174485", "read_file", ARGS), finish("tool_calls")),
    [("365174485", "read_file", ARGS)],
)

# -- delta shapes ----------------------------------------------------------------------------

case(
    "index_missing",
    "delta shapes: index missing (Ollama before 0.4.7)",
    sse(
        calls(tool(id=OPENAI_ID, type="function", name="read_file", arguments="")),
        calls(tool(arguments='{"path":')),
        calls(tool(arguments='"src/main.py"}')),
        calls(tool(id=OTHER_ID, type="function", name="grep", arguments=ARGS2)),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS), (OTHER_ID, "grep", ARGS2)],
)

case(
    "index_null",
    "delta shapes: index null (Gemini compat)",
    sse(
        calls(tool(index=None, id="", type="function", name="read_file", arguments="")),
        calls(tool(index=None, arguments='{"path":"src/main.py"}')),
        calls(tool(index=None, id="", type="function", name="grep", arguments=ARGS2)),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "grep", ARGS2)],
)

case(
    "every_parallel_call_at_index_0_with_ids",
    "delta shapes: every parallel call at index 0 (Ollama 0.20, relays)",
    sse(
        *reference_call(0, OPENAI_ID, "read_file", ARGS),
        *reference_call(0, OTHER_ID, "grep", ARGS2),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS), (OTHER_ID, "grep", ARGS2)],
)

case(
    "every_parallel_call_at_index_0_whole_without_ids",
    "delta shapes: every parallel call at index 0, whole calls, no ids (Ollama)",
    sse(
        calls(tool(index=0, type="function", name="read_file", arguments={"path": "src/main.py"})),
        calls(
            tool(index=0, type="function", name="grep", arguments={"pattern": "TODO", "path": "."})
        ),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "grep", ARGS2)],
)

case(
    "indexes_start_at_1",
    "delta shapes: indexes starting at 1",
    sse(
        *reference_call(1, OPENAI_ID, "read_file", ARGS),
        *reference_call(2, OTHER_ID, "grep", ARGS2),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS), (OTHER_ID, "grep", ARGS2)],
)

case(
    "anthropic_content_block_numbering",
    "delta shapes: indexes following Anthropic's content blocks (Claude through translators)",
    sse(
        text("Let me look."),
        *reference_call(1, "toolu_01A09q90qw90lq917835lq9", "read_file", ARGS),
        *reference_call(3, "toolu_01B19q90qw90lq917835lq8", "grep", ARGS2),
        finish("tool_calls"),
    ),
    [
        ("toolu_01A09q90qw90lq917835lq9", "read_file", ARGS),
        ("toolu_01B19q90qw90lq917835lq8", "grep", ARGS2),
    ],
    content="Let me look.",
)

case(
    "sglang_tool_position_in_first_delta",
    "delta shapes: SGLang's first delta numbered by the tool's position in `tools`",
    sse(
        calls(header(2, OPENAI_ID, "read_file")),
        calls(frag(0, '{"path":')),
        calls(frag(0, '"src/main.py"}')),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "sglang_tool_position_two_parallel_calls",
    "delta shapes: SGLang's tool positions and call order crossing over two calls",
    sse(
        calls(header(1, OPENAI_ID, "grep")),  # grep is tools[1]; it is call 0
        calls(frag(0, '{"pattern":"TODO",')),
        calls(frag(0, '"path":"."}')),
        calls(header(0, OTHER_ID, "read_file")),  # read_file is tools[0]; it is call 1
        calls(frag(1, '{"path":')),
        calls(frag(1, '"src/main.py"}')),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "grep", ARGS2), (OTHER_ID, "read_file", ARGS)],
)

case(
    "whole_call_in_one_delta",
    "delta shapes: a whole call in one delta (Groq, Ollama, xAI, Mistral)",
    sse(
        role(),
        calls(header(0, "aB3dE5gH9", "read_file", ARGS), finish="tool_calls"),
    ),
    [("aB3dE5gH9", "read_file", ARGS)],
)

case(
    "several_calls_in_one_chunk",
    "delta shapes: several calls in one chunk's tool_calls array (Gemini compat)",
    sse(
        chunk(
            {
                "role": "assistant",
                "tool_calls": [
                    tool(id="", type="function", name="read_file", arguments=ARGS),
                    tool(id="", type="function", name="grep", arguments=ARGS2),
                ],
            }
        ),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "grep", ARGS2)],
)

case(
    "two_fragments_of_one_index_in_one_delta",
    "delta shapes: two fragments of the same index inside one delta",
    sse(
        calls(header(0, OPENAI_ID, "read_file")),
        calls(frag(0, '{"path":'), frag(0, '"src/main.py"}')),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "id_type_name_repeated_on_every_delta",
    "delta shapes: id, type and name repeated on every delta (Fireworks, NIM, Bailian)",
    sse(
        calls(tool(index=0, id=OPENAI_ID, type="function", name="read_file", arguments="")),
        calls(tool(index=0, id=OPENAI_ID, type="function", name="read_file", arguments='{"path"')),
        calls(tool(index=0, id=OPENAI_ID, type="function", name="read_file", arguments=':"src/')),
        calls(
            tool(index=0, id=OPENAI_ID, type="function", name="read_file", arguments='main.py"}')
        ),
        calls(tool(index=1, id=OTHER_ID, type="function", name="grep", arguments=ARGS2)),
        calls(tool(index=1, id=OTHER_ID, type="function", name="grep", arguments="")),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS), (OTHER_ID, "grep", ARGS2)],
)

case(
    "type_missing",
    "delta shapes: type missing (Mistral on Azure)",
    sse(
        calls(tool(index=0, id="aB3dE5gH9", name="read_file", arguments=ARGS)),
        finish("tool_calls"),
    ),
    [("aB3dE5gH9", "read_file", ARGS)],
)

case(
    "type_null",
    "delta shapes: type null (DeepInfra)",
    sse(
        calls(tool(index=0, id=OPENAI_ID, type=None, name="read_file", arguments="")),
        *one_per_chunk(split_args(0, ARGS, 5)),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "type_late",
    "delta shapes: type late (on a later delta)",
    sse(
        calls(tool(index=0, id=OPENAI_ID, name="read_file", arguments="")),
        calls(tool(index=0, type="function", arguments='{"path":')),
        calls(frag(0, '"src/main.py"}')),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "interleaved_fragments",
    "delta shapes: parallel calls' fragments interleaved (0, 1, 0, 1)",
    sse(
        calls(header(0, OPENAI_ID, "read_file")),
        calls(header(1, OTHER_ID, "grep")),
        calls(frag(0, '{"path":')),
        calls(frag(1, '{"pattern":"TODO",')),
        calls(frag(0, '"src/main.py"}')),
        calls(frag(1, '"path":"."}')),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS), (OTHER_ID, "grep", ARGS2)],
)


def _no_empty_tool_calls(events: list[Event]) -> None:
    for body in chunks_of(events):
        for ch in body["choices"]:
            assert ch.get("delta", {}).get("tool_calls") != []


case(
    "empty_tool_calls_on_text_deltas",
    '"tool_calls": [] on every text delta (some reasoning servers)',
    sse(
        chunk({"role": "assistant", "content": "", "tool_calls": []}),
        chunk({"reasoning_content": "think", "tool_calls": []}),
        chunk({"content": "Hello", "tool_calls": []}),
        chunk({"content": " world", "tool_calls": []}),
        finish("stop"),
    ),
    [],
    finish="stop",
    content="Hello world",
    check=_no_empty_tool_calls,
)

# -- arguments -------------------------------------------------------------------------------

case(
    "object_arguments",
    "arguments: a JSON object instead of a string (llama.cpp, Ollama native, TGI)",
    sse(
        calls(
            tool(
                index=0, id="", type="function", name="read_file", arguments={"path": "src/main.py"}
            )
        ),
        calls(
            tool(
                index=1,
                id="",
                type="function",
                name="grep",
                arguments={"pattern": "TODO", "path": "."},
            )
        ),
        finish("tool_calls"),
    ),
    [(minted(1, 0), "read_file", ARGS), (minted(1, 1), "grep", ARGS2)],
)

for label, value in [("empty_string", ""), ("null", None), ("missing", MISSING)]:
    case(
        f"parameterless_arguments_{label}",
        f"arguments: {label} for parameterless tools",
        sse(
            calls(tool(index=0, id=OPENAI_ID, type="function", name="list_files", arguments=value)),
            calls(tool(index=1, id=OTHER_ID, type="function", name="now", arguments=value)),
            finish("tool_calls"),
        ),
        [(OPENAI_ID, "list_files", "{}"), (OTHER_ID, "now", "{}")],
    )

case(
    "final_flush_of_complete_arguments",
    'arguments: the complete arguments sent again at the end (vLLM final flush), {"a":1}{"a":1}',
    sse(
        calls(header(0, OPENAI_ID, "read_file")),
        *one_per_chunk(split_args(0, ARGS, 2, 9)),
        calls(frag(0, ARGS)),
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "final_flush_with_the_finish_reason",
    "arguments: the final flush in the finish chunk, for two calls",
    sse(
        calls(header(0, OPENAI_ID, "read_file")),
        *one_per_chunk(split_args(0, ARGS, 5)),
        calls(header(1, OTHER_ID, "grep")),
        *one_per_chunk(split_args(1, ARGS2, 7)),
        calls(frag(0, ARGS), frag(1, ARGS2), finish="tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS), (OTHER_ID, "grep", ARGS2)],
)

# -- finishing -------------------------------------------------------------------------------

case(
    "stop_after_tool_calls",
    'finishing: finish_reason "stop" after tool calls (Gemini compat, Workers AI, Kimi/OpenRouter)',
    sse(*reference_call(0, OPENAI_ID, "read_file", ARGS), finish("stop")),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "tool_calls_without_a_call",
    'finishing: finish_reason "tool_calls" with no tool call (vLLM zero-argument drop)',
    sse(role(), text("Done."), finish("tool_calls")),
    [],
    finish="stop",
    content="Done.",
)

case(
    "no_finish_reason_with_calls",
    "finishing: no finish_reason at all (Cerebras, relays)",
    sse(*reference_call(0, OPENAI_ID, "read_file", ARGS)),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "no_finish_reason_text_only",
    "finishing: no finish_reason at all, text only",
    sse(role(), text("Hello"), text(" there")),
    [],
    finish="stop",
    content="Hello there",
)

case(
    "no_done",
    "finishing: no [DONE] (Cerebras, relays)",
    sse(*reference_call(0, OPENAI_ID, "read_file", ARGS), finish("tool_calls"), done=False),
    [(OPENAI_ID, "read_file", ARGS)],
)

case(
    "no_finish_reason_and_no_done",
    "finishing: neither finish_reason nor [DONE], the call only decided at the end",
    sse(calls(tool(index=0, type="function", name="list_files")), done=False),
    [(minted(1, 0), "list_files", "{}")],
)


def _usage_with(choices: Any) -> Callable[[list[Event]], None]:
    def check(events: list[Event]) -> None:
        usage = [b for b in chunks_of(events) if b.get("usage")]
        assert len(usage) == 1
        assert usage[0]["choices"] == choices
        assert usage[0]["usage"]["total_tokens"] == 15

    return check


case(
    "usage_with_choices_empty",
    "finishing: usage on a chunk with choices: []",
    sse(text("Hi"), finish("stop"), usage_chunk()),
    [],
    finish="stop",
    content="Hi",
    check=_usage_with([]),
)

case(
    "usage_with_choices_null",
    "finishing: usage on a chunk with choices: null",
    sse(text("Hi"), finish("stop"), usage_chunk(choices=None)),
    [],
    finish="stop",
    content="Hi",
    check=_usage_with(None),
)


def _usage_glued(events: list[Event]) -> None:
    usage = [b for b in chunks_of(events) if b.get("usage")]
    assert len(usage) == 1
    assert usage[0]["choices"][0]["delta"] == {"content": "!"}


case(
    "usage_glued_to_last_content_chunk",
    "finishing: usage glued to the last content chunk",
    sse(
        text("Hi"),
        text("!", usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}),
    ),
    [],
    finish="stop",
    content="Hi!",
    check=_usage_glued,
)


def _usage_with_finish(events: list[Event]) -> None:
    usage = [b for b in chunks_of(events) if b.get("usage")]
    assert len(usage) == 1
    assert usage[0]["choices"][0]["finish_reason"] == "tool_calls"


case(
    "usage_glued_to_finish_after_calls",
    "finishing: usage glued to a finish chunk that says stop after calls",
    sse(
        *reference_call(0, OPENAI_ID, "read_file", ARGS),
        finish("stop", usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
    check=_usage_with_finish,
)


# -- framing ---------------------------------------------------------------------------------


def _comments_in_order(events: list[Event]) -> None:
    kinds = [
        e.other[0] if e.other else ("done" if e.is_done else "chunk")
        for e in events
        if e.other or e.is_done or e.is_chunk
    ]
    assert kinds[0] == ": OPENROUTER PROCESSING"
    assert kinds.count(": keep-alive") == 2
    assert kinds[-1] == "done"


case(
    "sse_comments_forwarded",
    "framing: SSE comments (: OPENROUTER PROCESSING, : keep-alive) during long waits",
    sse(
        b": OPENROUTER PROCESSING",
        role(),
        b": keep-alive",
        *reference_call(0, OPENAI_ID, "read_file", ARGS),
        b": keep-alive",
        finish("tool_calls"),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
    check=_comments_in_order,
)


def _placeholder_passes(events: list[Event]) -> None:
    first = chunks_of(events)[0]
    assert first["id"] == ""
    assert first["model"] == ""
    assert first["choices"] == []


case(
    "placeholder_first_chunk",
    'framing: a placeholder first chunk with id: "", model: "", choices: []',
    sse(
        {"id": "", "object": "chat.completion.chunk", "created": 0, "model": "", "choices": []},
        role(),
        *reference_call(0, OPENAI_ID, "read_file", ARGS),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
    check=_placeholder_passes,
)


def _chunk_ids_kept(events: list[Event]) -> None:
    ids = [b["id"] for b in chunks_of(events)]
    assert ids[:3] == ["gen-1", "gen-2", "gen-3"]


case(
    "chunk_id_changes_per_chunk",
    "framing: chunk id changing per chunk, or not chatcmpl-...",
    sse(
        chunk({"role": "assistant", "content": "a"}, id="gen-1"),
        chunk({"content": "b"}, id="gen-2"),
        calls(header(0, OPENAI_ID, "read_file", ARGS), id="gen-3"),
        finish("tool_calls", id="gen-4"),
    ),
    [(OPENAI_ID, "read_file", ARGS)],
    content="ab",
    check=_chunk_ids_kept,
)

KIMI_MARKUP = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.read_file:0"
    '<|tool_call_argument_begin|>{"path":"a"}<|tool_call_end|><|tool_calls_section_end|>'
)
case(
    "tool_call_markup_left_in_text_passes_unchanged",
    "tool calls left in the text: markup passes through as content (SPEC §4), split markers too",
    sse(text(KIMI_MARKUP[:20]), text(KIMI_MARKUP[20:50]), text(KIMI_MARKUP[50:]), finish("stop")),
    [],
    finish="stop",
    content=KIMI_MARKUP,
)


# -- the table's driver -------------------------------------------------------------------------


def sdk_reassemble(events: list[Event]) -> list[tuple[str, str, str]]:
    """The same calls, reassembled by the openai SDK's own delta accumulator."""
    acc: dict[object, object] = {}
    for body in chunks_of(events):
        for ch in body.get("choices") or ():
            if ch.get("index") == 0 and ch.get("delta"):
                accumulate_delta(acc, ch["delta"])
    tool_calls: Any = acc.get("tool_calls") or []
    return [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in tool_calls]


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_quirk(c: Case) -> None:
    result = run(c.setup.core, c.upstream)
    events = result.events
    assert_well_formed(events)
    assert call_summary(events) == c.calls
    assert sdk_reassemble(events) == c.calls
    assert finish_reasons(events) == [c.finish]
    assert content_of(events) == c.content
    if c.check is not None:
        c.check(events)


@pytest.mark.parametrize("eol", ["\r\n", "\r"], ids=["CRLF", "CR"])
@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_quirk_with_other_line_ends(c: Case, eol: str) -> None:
    """The same client events with CRLF or CR framing, read whole or with every read ending
    in a CR (a CRLF pair split across reads)."""
    lf = parse_sse(feed_reads(c.setup.core(), [c.upstream]))
    other = c.upstream.replace(b"\n", eol.encode())
    assert parse_sse(feed_reads(c.setup.core(), [other])) == lf
    reads = [piece + b"\r" for piece in other.split(b"\r")]
    reads[-1] = reads[-1][:-1]
    assert b"".join(reads) == other
    assert parse_sse(feed_reads(c.setup.core(), reads)) == lf


def test_table_covers_every_quirk_group() -> None:
    quirks = " ".join(c.quirk for c in CASES)
    for group in ("reference:", "ids:", "delta shapes:", "arguments:", "finishing:", "framing:"):
        assert group in quirks
    assert len({c.name for c in CASES}) == len(CASES)
