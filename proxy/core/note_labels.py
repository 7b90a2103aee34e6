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

# DeltaRepaired.kind of the repairs made to the response the client receives, of every surface
# (a kind one surface never emits stays at 0 there): toolcall_proxy_deltas_repaired_total.
DELTA_REPAIR_KINDS: tuple[str, ...] = (
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
)

# DeltaRepaired.kind of the repairs made to the request the upstream receives, every surface
# and bridge (SPEC §11, proxy/core/request_repair.py): toolcall_proxy_requests_repaired_total,
# the log line's `request_repairs` and the response's x-toolcall-proxy-repaired header.
REQUEST_REPAIR_KINDS: tuple[str, ...] = (
    "missing_result",
    "result_moved",
    "orphan_result",
    "duplicate_result",
    "result_order",
    "history_arguments",
    "tool_schema",
    # Provider families (SPEC §11, proxy/core/families.py)
    "reasoning_passback",
    "role",
    "content",
    "client_only_block",
)
REQUEST_REPAIRS: frozenset[str] = frozenset(REQUEST_REPAIR_KINDS)

# Every DeltaRepaired.kind, of either direction.
REPAIR_KINDS: tuple[str, ...] = DELTA_REPAIR_KINDS + REQUEST_REPAIR_KINDS

# The repeat guard's actions (SPEC §10): a note added, a call answered, a loop stopped.
REPEAT_ACTIONS: tuple[str, ...] = ("note", "blocked", "stopped")
