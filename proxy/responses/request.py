"""Request direction on Responses (SPEC §3, §8): `input` items' call ids into the dialect.

A thin walk over the shared `HistoryLedger`: a turn is a run of consecutive model-made items
(an assistant `message`, `function_call`, `custom_tool_call`, `reasoning`); every call item
tells the ledger its `call_id`, every `*_output` item asks which call it answers. Each item
then carries the upstream id the ledger decided. An output whose call is not in `input`
(stored conversations: `previous_response_id`, `conversation`) answers a call the upstream
keeps: its `call_{hex8}_{raw}` client id is decoded back to the raw id the upstream issued.
Everything else in the request keeps its form; a request that needs no change is forwarded
byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from proxy.core.ids import fingerprint, normalize_raw_id
from proxy.core.jsontext import dumps
from proxy.core.ledger import Fingerprint, HistoryFacts, HistoryLedger, LedgerCall, resolve_dialect
from proxy.core.repeat import note_text, with_note
from proxy.responses.ids import decode_call_id

CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
_MODEL_TYPES = frozenset({"function_call", "custom_tool_call", "reasoning"})


@dataclass(slots=True)
class TranslatedRequest:
    body: dict[str, Any]
    facts: HistoryFacts
    changed: bool
    # (client id, upstream id, what) for every call and stored-call output, for --explain
    translations: list[tuple[str | None, str, str]] = field(default_factory=list)

    def to_bytes(self, original: bytes) -> bytes:
        return dumps(self.body) if self.changed else original


def item_type(item: dict[str, Any]) -> object:
    """An item's type; an easy input message (`{"role", "content"}`) has none and is one."""
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind


def is_model_made(item: object) -> bool:
    if not isinstance(item, dict):
        return False
    kind = item_type(item)
    return kind in _MODEL_TYPES or (kind == "message" and item.get("role") == "assistant")


def call_payload(item: dict[str, Any]) -> tuple[str, Any]:
    """A call item's name and arguments (`custom_tool_call` carries a string `input`)."""
    name = item.get("name")
    key = "input" if item_type(item) == "custom_tool_call" else "arguments"
    return (name if isinstance(name, str) else ""), item.get(key)


def offered_tools(body: dict[str, Any]) -> frozenset[str]:
    """Names of the function and custom tools offered, namespaces' nested tools included."""
    names: set[str] = set()
    pending = list(body.get("tools") or ()) if isinstance(body.get("tools"), list) else []
    for _ in range(10_000):  # bounded: a namespace holds tools, never itself
        if not pending:
            break
        tool = pending.pop()
        if not isinstance(tool, dict):
            continue
        if isinstance(tool.get("name"), str) and tool.get("type") in ("function", "custom"):
            names.add(tool["name"])
        nested = tool.get("tools")
        if isinstance(nested, list):
            pending.extend(nested)
    return frozenset(names)


def translate_request(
    body: dict[str, Any],
    dialect_setting: str,
    repeat_guard: str = "off",
    repeat_exempt: tuple[str, ...] = (),
) -> TranslatedRequest:
    """Translate `body['input']` for the upstream; with the repeat guard on (SPEC §10), a
    run of identical rounds notes its last output item."""
    dialect = resolve_dialect(dialect_setting, body.get("model"))
    ledger = HistoryLedger(dialect)
    items = body.get("input")
    if not isinstance(items, list):
        facts = ledger.facts(offered_tools=offered_tools(body))
        return TranslatedRequest(body, facts, False)
    targets, last_output = _walk(items, ledger)
    facts = _with_decoded_ids(
        ledger,
        ledger.facts(
            offered_tools=offered_tools(body),
            repeat_guard=repeat_guard,
            repeat_exempt=repeat_exempt,
        ),
    )
    new_items = _with_repeat_note(items, last_output, facts)
    translations: list[tuple[str | None, str, str]] = []
    for pos, call_id in targets.items():
        before = items[pos].get("call_id")
        if before != call_id:
            if new_items is items:
                new_items = list(items)
            new_items[pos] = {**new_items[pos], "call_id": call_id}
            what = items[pos].get("name") or items[pos].get("type")
            translations.append((before if isinstance(before, str) else None, call_id, str(what)))
    changed = new_items is not items
    out = {**body, "input": new_items} if changed else body
    return TranslatedRequest(out, facts, changed, translations)


def _with_repeat_note(items: list[Any], last_output: int, facts: HistoryFacts) -> list[Any]:
    """SPEC §10: a run of identical rounds notes the last output item (never a message of its
    own); `items` itself when there is nothing to note."""
    if facts.repeat is None or last_output < 0:
        return items
    noted = list(items)
    output = items[last_output]
    noted[last_output] = {
        **output,
        "output": with_note(output.get("output"), note_text(facts.repeat)),
    }
    return noted


def _walk(items: list[Any], ledger: HistoryLedger) -> tuple[dict[int, str], int]:
    """Tell the ledger the history in order: the call id each call or output item must
    carry, and the last output item's position (-1: none)."""
    targets: dict[int, str] = {}
    last_output = -1
    in_turn = False
    for pos, item in enumerate(items):
        model_made = is_model_made(item)
        if model_made and not in_turn:
            ledger.begin_turn()
        in_turn = model_made
        if not isinstance(item, dict):
            continue
        kind = item_type(item)
        if kind in CALL_TYPES:
            name, arguments = call_payload(item)
            record = ledger.call(normalize_raw_id(item.get("call_id")), name, arguments)
            targets[pos] = record.upstream_id
        elif kind in OUTPUT_TYPES:
            last_output = pos
            target = _output_target(ledger, item.get("call_id"), item.get("output"))
            if target is not None:
                targets[pos] = target
        elif kind == "message" and item.get("role") == "user":
            ledger.user_input()
    return targets, last_output


def _output_target(ledger: HistoryLedger, call_id: object, output: Any) -> str | None:
    record = ledger.result(normalize_raw_id(call_id), output)
    if record is not None:
        return record.upstream_id
    # A call the upstream stored (SPEC §8): the id it issued, decoded from the client id.
    return decode_call_id(call_id) if isinstance(call_id, str) else None


def _with_decoded_ids(ledger: HistoryLedger, facts: HistoryFacts) -> HistoryFacts:
    """SPEC §5's second form for encoded client ids: the raw id they carry is the one issued."""
    issued: dict[str, dict[Fingerprint, str]] = {}
    for record in ledger.calls:
        raw = _issued_raw(record)
        if raw is not None:
            issued.setdefault(raw, {}).setdefault(
                fingerprint(record.name, record.arguments), record.client_id or ""
            )
    if not issued:
        return facts
    merged = {key: dict(value) for key, value in facts.issued_ids.items()}
    for raw, prints in issued.items():
        for key, client_id in prints.items():
            merged.setdefault(raw, {}).setdefault(key, client_id)
    return replace(facts, issued_ids=merged)


def _issued_raw(record: LedgerCall) -> str | None:
    if not record.answered or record.client_id is None:
        return None
    return decode_call_id(record.client_id)
