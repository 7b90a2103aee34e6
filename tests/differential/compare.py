"""Compare what an SDK accumulated straight from the upstream with what it accumulated through
the proxy, field by field.

Only what a SPEC rule lets the proxy change is normalised before the comparison (SPEC §8: "the
proxy changes only what a rule here names: ids, indexes, sequence numbers, the stop signal
where it contradicts what was delivered, and the framing it must complete"):
- tool-call ids (Chat `tool_calls[].id`, Anthropic `tool_use` ids, Responses `call_id` and the
  `function_call` / `custom_tool_call` item `id`) are checked structurally on the proxy's side
  (well-formed, unique in the response), then replaced by a placeholder on both sides; the
  count of calls is compared as part of the lists;
- tool-call indexes (Chat `tool_calls[].index`) become positions;
- a later call repeating an earlier one's raw id and fingerprint is dropped (SPEC §2.4);
- an empty Chat `tool_calls: []` is removed (SPEC §4);
- arguments an upstream sent as a JSON object are compared with the proxy's JSON string
  canonically (SPEC §4: objects become JSON strings);
- the stop signal is what SPEC §4/§8 make of the upstream's, given the calls delivered;
- a Responses `response.completed` whose `output` is empty gets the streamed items (SPEC §8:
  its `output` lists exactly the items streamed);
- an Anthropic `stop_details` the SDK set to null from a `message_delta` the proxy had to
  write (the upstream sent none) counts as the absent one it was.
The fields an SDK adds to what it parsed (`parsed`, `parsed_arguments`, `parsed_output`) are
left out on both sides. Everything else must be equal: any other difference is a finding.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]
PLACEHOLDER = "<id>"
CHAT_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")
ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
CALL_ID = re.compile(r"\S{1,64}")  # SPEC §8: at most 64 characters (OpenAI's limit)
ITEM_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
RESPONSES_CALLS = ("function_call", "custom_tool_call")
SDK_FIELDS = frozenset({"parsed", "parsed_arguments", "parsed_output"})


# -- the field-by-field diff ------------------------------------------------------------------


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 160 else text[:157] + "..."


def diff(upstream: Any, proxied: Any, path: str = "$") -> list[str]:
    """Every difference as `path: upstream <value> | proxy <value>`."""
    if isinstance(upstream, dict) and isinstance(proxied, dict):
        out: list[str] = []
        for key in list(upstream) + [k for k in proxied if k not in upstream]:
            where = f"{path}.{key}"
            if key not in proxied:
                out.append(f"{where}: upstream {_show(upstream[key])} | proxy <absent>")
            elif key not in upstream:
                out.append(f"{where}: upstream <absent> | proxy {_show(proxied[key])}")
            else:
                out += diff(upstream[key], proxied[key], where)
        return out
    if isinstance(upstream, list) and isinstance(proxied, list):
        out = []
        if len(upstream) != len(proxied):
            out.append(f"{path}: upstream {len(upstream)} elements | proxy {len(proxied)}")
        for i, (a, b) in enumerate(zip(upstream, proxied, strict=False)):
            out += diff(a, b, f"{path}[{i}]")
        return out
    if type(upstream) is not type(proxied) or upstream != proxied:
        return [f"{path}: upstream {_show(upstream)} | proxy {_show(proxied)}"]
    return []


# -- shared normalisations --------------------------------------------------------------------


def canonical(value: Any) -> str:
    """SPEC §0's canonical arguments: JSON with sorted keys; a non-JSON string as itself."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def drop_repeats(calls: list[JSON], key: Callable[[JSON], tuple[Any, ...] | None]) -> list[JSON]:
    """SPEC §2.4: a later call with an earlier call's raw id and fingerprint is dropped."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for call in calls:
        mark = key(call)
        if mark is not None and mark in seen:
            continue
        if mark is not None:
            seen.add(mark)
        kept.append(call)
    return kept


def check_ids(values: list[Any], pattern: re.Pattern[str], what: str) -> list[str]:
    """The proxy's ids: each well-formed, none repeated in the response."""
    problems = [
        f"{what} {value!r} is not well-formed"
        for value in values
        if not isinstance(value, str) or not pattern.fullmatch(value)
    ]
    repeated = sorted({v for v in values if isinstance(v, str) and values.count(v) > 1})
    if repeated:
        problems.append(f"{what}s repeat in one response: {repeated}")
    return problems


def _stringify(ref: JSON, got: JSON, key: str) -> None:
    """SPEC §4: arguments sent as a JSON object reach the client as a JSON string; the two are
    compared canonically (a string the upstream sent stays compared byte for byte)."""
    if key in ref and not isinstance(ref[key], str) and isinstance(got.get(key), str):
        ref[key] = canonical(ref[key])
        got[key] = canonical(got[key])


def strip_sdk_fields(node: Any) -> Any:
    """The fields an SDK adds to what it parsed (`parsed`, `parsed_arguments`,
    `parsed_output`): never sent by a server, and set or left out by the SDK depending on which
    of its code paths ran, so they say nothing about the proxy."""
    if isinstance(node, dict):
        return {k: strip_sdk_fields(v) for k, v in node.items() if k not in SDK_FIELDS}
    if isinstance(node, list):
        return [strip_sdk_fields(v) for v in node]
    return node


def _mask(items: list[JSON], keys: tuple[str, ...]) -> None:
    for item in items:
        for key in keys:
            item[key] = PLACEHOLDER


def stop_after_rule(upstream: Any, delivered: bool, *, tool: str, plain: str) -> Any:
    """The stop signal SPEC §4/§8 let the client see: the tool signal when calls were
    delivered and the upstream said the plain one or nothing, the plain one when it claimed
    the tool signal and delivered none; anything else as the upstream said it."""
    if delivered and upstream in (plain, None):
        return tool
    if not delivered and upstream == tool:
        return plain
    return upstream


# -- Chat Completions -------------------------------------------------------------------------


def _chat_calls(message: JSON) -> list[JSON]:
    calls = message.get("tool_calls")
    return calls if isinstance(calls, list) else []


def _chat_fingerprint(call: JSON) -> tuple[Any, ...] | None:
    raw = call.get("id")
    fn = call.get("function") or {}
    if raw in (None, ""):
        return None
    return (raw, fn.get("name"), canonical(fn.get("arguments") or ""))


def _chat_empty_calls(rm: JSON, gm: JSON) -> None:
    """SPEC §4 removes an empty `tool_calls: []`: the client then holds what it holds for a
    message that never had the key (null in a stream's snapshot, absent in a body)."""
    if rm.get("tool_calls") == [] and not gm.get("tool_calls"):
        if "tool_calls" in gm:
            rm["tool_calls"] = gm["tool_calls"]
        else:
            del rm["tool_calls"]


def _chat_tool_calls(rm: JSON, gm: JSON, ids: list[Any]) -> None:
    if isinstance(rm.get("tool_calls"), list):
        rm["tool_calls"] = drop_repeats(rm["tool_calls"], _chat_fingerprint)
    for ref_call, got_call in zip(_chat_calls(rm), _chat_calls(gm), strict=False):
        _stringify(ref_call.get("function") or {}, got_call.get("function") or {}, "arguments")
    ids += [call.get("id") for call in _chat_calls(gm)]
    for message in (rm, gm):
        _mask(_chat_calls(message), ("id",))
        for position, call in enumerate(_chat_calls(message)):
            call["index"] = position


def _chat_finish(ref: JSON, delivered: bool) -> None:
    if "finish_reason" not in ref:
        return
    upstream = ref["finish_reason"]
    ref["finish_reason"] = stop_after_rule(upstream, delivered, tool="tool_calls", plain="stop")
    if upstream is None:  # the proxy completes a stream that never said how it ended
        ref["finish_reason"] = "tool_calls" if delivered else "stop"


def _chat_choice(ref: JSON, got: JSON, ids: list[Any]) -> None:
    rm, gm = ref.get("message") or {}, got.get("message") or {}
    _chat_empty_calls(rm, gm)
    _chat_tool_calls(rm, gm, ids)
    _chat_finish(ref, bool(_chat_calls(gm)))


def normalise_chat(ref: JSON, got: JSON) -> list[str]:
    ids: list[Any] = []
    for rc, gc in zip(ref.get("choices") or [], got.get("choices") or [], strict=False):
        _chat_choice(rc, gc, ids)
    return check_ids(ids, CHAT_ID, "tool call id")


# -- Anthropic Messages -----------------------------------------------------------------------


def _anthropic_fingerprint(block: JSON) -> tuple[Any, ...] | None:
    if block.get("type") != "tool_use" or block.get("id") in (None, ""):
        return None
    return (block["id"], block.get("name"), canonical(block.get("input")))


def normalise_anthropic(ref: JSON, got: JSON) -> list[str]:
    if isinstance(ref.get("content"), list):
        ref["content"] = drop_repeats(ref["content"], _anthropic_fingerprint)
    uses = [
        [b for b in side.get("content") or [] if b.get("type") == "tool_use"] for side in (ref, got)
    ]
    problems = check_ids([b.get("id") for b in uses[1]], ANTHROPIC_ID, "tool_use id")
    for blocks in uses:
        _mask(blocks, ("id",))
    if "stop_details" not in ref and got.get("stop_details", False) is None:
        # The SDK sets `stop_details` from any `message_delta`, so a stream the proxy had to
        # complete (no `message_delta` upstream) reads it as null: framing, not a change.
        del got["stop_details"]
    if "stop_reason" in ref:
        _anthropic_stop(ref, got, bool(uses[1]))
    return problems


def _anthropic_stop(ref: JSON, got: JSON, delivered: bool) -> None:
    upstream = ref["stop_reason"]
    ref["stop_reason"] = stop_after_rule(upstream, delivered, tool="tool_use", plain="end_turn")
    if upstream is None and not delivered and got.get("stop_reason") == "end_turn":
        ref["stop_reason"] = "end_turn"  # the completion of a stream that never said (SPEC §8)


# -- Responses --------------------------------------------------------------------------------


def _responses_fingerprint(item: JSON) -> tuple[Any, ...] | None:
    if item.get("type") not in RESPONSES_CALLS or item.get("call_id") in (None, ""):
        return None
    body = item.get("arguments") if item["type"] == "function_call" else item.get("input")
    return (item["call_id"], item.get("name"), canonical(body or ""))


def _responses_items(ref: list[JSON], got: list[JSON]) -> tuple[list[JSON], list[str]]:
    ref = drop_repeats(ref, _responses_fingerprint)
    calls = [[i for i in side if i.get("type") in RESPONSES_CALLS] for side in (ref, got)]
    for ref_call, got_call in zip(calls[0], calls[1], strict=False):
        _stringify(ref_call, got_call, "arguments")
    problems = check_ids([c.get("call_id") for c in calls[1]], CALL_ID, "call_id")
    problems += check_ids([c.get("id") for c in calls[1]], ITEM_ID, "call item id")
    for side in calls:
        _mask(side, ("call_id", "id"))
    return ref, problems


def normalise_responses(
    ref: JSON, got: JSON, ref_items: list[JSON], got_items: list[JSON]
) -> tuple[list[JSON], list[str]]:
    """Normalises both responses in place; returns the reference's done items and the
    structural problems found on the proxy's side."""
    if ref.get("output") == [] and ref_items:
        ref["output"] = copy.deepcopy(ref_items)
    problems: list[str] = []
    if isinstance(ref.get("output"), list) and isinstance(got.get("output"), list):
        ref["output"], problems = _responses_items(ref["output"], got["output"])
    ref_items, more = _responses_items(ref_items, got_items)
    return ref_items, problems + [p for p in more if p not in problems]
