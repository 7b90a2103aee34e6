"""Every quirk the doctor can name: in the words of the project's quirk list, with what the
proxy does about it. The observers (observers.py) refer to these by code."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Quirk:
    code: str
    title: str  # what the provider does
    repair: str  # what the proxy does about it


_ALL = (
    # Ids
    Quirk(
        "counter_ids",
        "ids that only count calls within one response (`call_0`, `{name}_{n}`, bare numbers)",
        "gives the client unique `call_{turn}_{idx}_{hex8}` ids (ids: auto)",
    ),
    Quirk(
        "kimi_ids",
        "Kimi's `functions.{name}:{n}` ids",
        "gives the client valid unique ids and the upstream `functions.{name}:{n}` back, with "
        "a steady counter (dialect: kimi)",
    ),
    Quirk(
        "recurring_ids",
        "the same id in more than one turn",
        "rewrites an id that collides with the history, so a client never sees one twice",
    ),
    Quirk("missing_ids", "missing ids", "gives the call an id"),
    Quirk("empty_ids", '`""` (empty) ids', "gives the call an id"),
    Quirk(
        "integer_ids",
        "bare integers instead of strings as ids",
        "reads them as strings, then judges them like any id",
    ),
    Quirk(
        "null_string_ids",
        'the string `"null"` as the id on continuation deltas',
        "ignores it: the call keeps its first id",
    ),
    Quirk(
        "changing_ids",
        "a new id on every delta of one call",
        "keeps the first real id: one header per call",
    ),
    Quirk(
        "duplicate_ids",
        "the same id on two calls of one response",
        "drops an identical copy and gives a different call its own id",
    ),
    Quirk(
        "invalid_ids",
        "ids other clients reject (over 40 characters, or characters outside `[A-Za-z0-9_-]`)",
        "gives the client a valid id (ids: auto)",
    ),
    # Delta shapes
    Quirk(
        "repeated_fields",
        "`id`, `type` or `name` repeated on every delta (clients that append them get "
        "`read_fileread_file`)",
        "sends them once, in the call's first delta",
    ),
    Quirk(
        "missing_index",
        "`index` missing or `null` on tool-call deltas",
        "tells calls apart by name and id and numbers them",
    ),
    Quirk(
        "parallel_one_index",
        "every parallel call at index 0",
        "gives each call its own index",
    ),
    Quirk(
        "sparse_index",
        "indexes that do not count 0, 1, 2 (starting at 1, or skipping)",
        "numbers the calls densely from 0",
    ),
    Quirk("missing_type", "`type` missing, `null` or late", 'adds `"type": "function"`'),
    # Arguments
    Quirk(
        "object_arguments",
        "arguments as a JSON object instead of a string",
        "sends them as a JSON string",
    ),
    Quirk(
        "empty_arguments",
        '`""`, `null` or no `arguments` for a call (`JSON.parse("")` throws)',
        'sends `"{}"`',
    ),
    Quirk(
        "final_flush",
        "the complete arguments sent again after the fragments (a final flush: `{…}{…}`)",
        "forwards only what the flush adds",
    ),
    # Finishing
    Quirk(
        "stop_after_calls",
        '`finish_reason: "stop"` after tool calls (agent loops stop and never run the tools)',
        'says `"tool_calls"`',
    ),
    Quirk(
        "tool_calls_without_calls",
        '`finish_reason: "tool_calls"` with no tool call',
        'says `"stop"`',
    ),
    Quirk("no_finish_reason", "no `finish_reason` at all", "ends the stream with one"),
    Quirk("no_done", "no `data: [DONE]` at the end of the stream", "ends the stream with it"),
    # Framing
    Quirk(
        "keep_alives",
        "SSE comments (`: keep-alive`) during the stream",
        "passes them through (they are legal; hand-written SSE readers sometimes are not)",
    ),
    Quirk(
        "non_json_data",
        "`data:` lines that are not JSON (the openai SDKs raise on them)",
        "turns each into an SSE comment carrying the same text, in place, and counts it; "
        "inside an open tool call it ends the stream with an upstream_stream_error instead",
    ),
    Quirk(
        "crlf_framing",
        "`\\r\\n` line ends or `data:` without a space",
        "writes OpenAI's framing",
    ),
    # Text and replays
    Quirk(
        "leaked_markup",
        "tool calls left in the text as raw markup",
        "recovers them as real tool calls (text_tool_calls: auto)",
    ),
    Quirk(
        "replay",
        "a call already answered sent again, with the same arguments (a replay)",
        "answers a true replay itself with a message the model sees, and stops a loop with "
        "`loop_detected` (replay_guard: on)",
    ),
)
QUIRKS = MappingProxyType({quirk.code: quirk for quirk in _ALL})
