"""Every value a decision note carries into a metric label (SPEC §7): the known reasons and kinds.

The metrics export each of them at 0 from start-up, for every repaired surface, so that a
dashboard shows 0 rather than "No data" on a healthy proxy. A note emitted with a value missing
here would still be counted, but its series would only appear once it happened:
tests/ops/test_metric_labels.py reads the code that builds the notes and fails on a value that is
emitted but not listed, or listed but never emitted.
"""

from __future__ import annotations

from proxy.core.ids import (
    REASON_ABSENT,
    REASON_COLLISION,
    REASON_COUNTER,
    REASON_DUPLICATE,
    REASON_INVALID,
    REASON_POLICY,
)

# IdRewritten.reason (and an in-response duplicate's CallDropped, counted as a rewrite too).
REWRITE_REASONS: tuple[str, ...] = (
    REASON_ABSENT,
    REASON_INVALID,
    REASON_COUNTER,
    REASON_COLLISION,
    REASON_DUPLICATE,
    REASON_POLICY,
)

# CallDropped.reason: an in-response duplicate, a replay (SPEC §5), a blocked repeat (SPEC §10).
DROP_REASONS: tuple[str, ...] = ("duplicate_in_response", "replay", "repeat")

# DeltaRepaired.kind, of every surface (a kind one surface never emits stays at 0 there).
REPAIR_KINDS: tuple[str, ...] = (
    # Chat Completions (proxy/chat)
    "arguments_flush",
    "empty_arguments",
    "empty_tool_calls",
    "finish_reason",
    "id_changed",
    "index_remapped",
    "malformed_tool_call",
    "malformed_tool_calls",
    "missing_index",
    "missing_type",
    "nameless_call_dropped",
    "non_json_data",
    "object_arguments",
    "parallel_calls_one_index",
    "repeated_fields",
    "text_tool_call",
    # Anthropic Messages (proxy/anthropic)
    "block_stop",
    "conflicting_input",
    "empty_input",
    "message_stop",
    "repeated_input",
    "stop_reason",
    "whole_input",
    # OpenAI Responses (proxy/responses)
    "arguments_after_done",
    # Requests the upstream accepts, every surface (SPEC §11, proxy/core/request_repair.py)
    "missing_result",
    "result_moved",
    "orphan_result",
    "duplicate_result",
    "result_order",
    "history_arguments",
    "tool_schema",
)

# The repeat guard's actions (SPEC §10): a note added, a call answered, a loop stopped.
REPEAT_ACTIONS: tuple[str, ...] = ("note", "blocked", "stopped")
