"""Request direction on Responses (SPEC §3, §8): `input` items' call ids into the dialect.

A thin walk over the shared `HistoryLedger`: a turn is a run of consecutive model-made items
(an assistant `message`, `function_call`, `custom_tool_call`, `reasoning`); every call item
tells the ledger its `call_id`, every `*_output` item asks which call it answers. Each item
then carries the upstream id the ledger decided. An output whose call is not in `input`
(stored conversations: `previous_response_id`, `conversation`) answers a call the upstream
keeps: its `call_{hex8}_{raw}` client id is decoded back to the raw id the upstream issued.
Everything else in the request keeps its form; a request that needs no change is forwarded
byte for byte.

What the upstream would refuse is repaired (SPEC §11, the rules in
`proxy.core.request_repair`, unless the route's `request_repair` is off): every call item
answered right after its run of model items (an output moved up from further down, or a
synthetic one), an output with no call, or a second one, as a marked user `message` item
where it stood, `function_call` arguments that do not parse as an object, empty schemas. A
request that leans on stored state (`previous_response_id`, `conversation`, `item_reference`)
has calls and outputs the proxy cannot see: its pairing is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from proxy.core.families import NO_FAMILY_RULES, FamilyRules
from proxy.core.ids import fingerprint, normalize_raw_id
from proxy.core.jsontext import dumps
from proxy.core.ledger import Fingerprint, HistoryFacts, HistoryLedger, LedgerCall, resolve_dialect
from proxy.core.notes import Note
from proxy.core.repeat import note_text, with_note
from proxy.core.request_repair import (
    DUPLICATE,
    KEEP,
    MISSING_RESULT,
    OTHER,
    RESULT,
    SYNTHETIC,
    TURN,
    RequestRepairs,
    ResultPairs,
    Step,
    Unit,
    marked_text,
    object_schema,
    parseable_arguments,
    plan_pairing,
    text_with_mark,
    with_tools,
)
from proxy.responses.families import family_items, family_tools
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
    repairs: list[Note] = field(default_factory=list)  # SPEC §11: one note per repair

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
    repair: bool = False,
    family: FamilyRules = NO_FAMILY_RULES,
) -> TranslatedRequest:
    """Translate `body['input']` for the upstream; with the repeat guard on (SPEC §10), a
    run of identical rounds notes its last output item; with `repair` (SPEC §11), what the
    upstream would refuse is repaired, by every upstream's rules and by those of the
    upstream's `family` (`proxy.responses.families`)."""
    dialect = resolve_dialect(dialect_setting, body.get("model"))
    ledger = HistoryLedger(dialect)
    repairs = RequestRepairs() if repair else None
    out_body = body
    if repairs is not None:
        out_body = family_tools(_with_tool_schemas(body, repairs), family, repairs)
    items = body.get("input")
    if not isinstance(items, list):
        facts = ledger.facts(offered_tools=offered_tools(body))
        changed = out_body is not body
        return TranslatedRequest(out_body, facts, changed, repairs=_notes(repairs))
    walk = _walk(items, ledger)
    facts = _with_decoded_ids(
        ledger,
        ledger.facts(
            offered_tools=offered_tools(body),
            repeat_guard=repeat_guard,
            repeat_exempt=repeat_exempt,
        ),
    )
    new_items = _with_repeat_note(items, walk.last_output, facts)
    translations: list[tuple[str | None, str, str]] = []
    for pos, call_id in walk.targets.items():
        before = items[pos].get("call_id")
        if before != call_id:
            if new_items is items:
                new_items = list(items)
            new_items[pos] = {**new_items[pos], "call_id": call_id}
            what = items[pos].get("name") or items[pos].get("type")
            translations.append((before if isinstance(before, str) else None, call_id, str(what)))
    if repairs is not None:
        new_items = _repaired(new_items, walk, ledger, repairs, _stored(body))
        new_items = family_items(new_items, family, repairs)
    if new_items is not items:
        out_body = {**out_body, "input": new_items}
    changed = out_body is not body
    return TranslatedRequest(out_body, facts, changed, translations, _notes(repairs))


def _notes(repairs: RequestRepairs | None) -> list[Note]:
    return [] if repairs is None else repairs.notes


def _stored(body: dict[str, Any]) -> bool:
    """Does the request lean on calls or outputs stored upstream (SPEC §8)?"""
    if body.get("previous_response_id") or body.get("conversation"):
        return True
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(item, dict) and item.get("type") == "item_reference" for item in items
    )


def _repaired(
    items: list[Any], walk: _Walk, ledger: HistoryLedger, repairs: RequestRepairs, stored: bool
) -> list[Any]:
    """SPEC §11: call items' arguments made parseable, then each call answered right after
    its run (unless the request leans on stored state); `items` itself when nothing needs it."""
    for pos in walk.call_items:
        item = items[pos]
        if item_type(item) != "function_call":
            continue  # a custom tool's input is free text
        arguments = item.get("arguments")
        text = arguments if isinstance(arguments, str | None) else dumps(arguments).decode()
        fixed = parseable_arguments(text)
        if fixed is not None:
            repairs.history_arguments(str(item.get("name")))
            if items is walk.items:
                items = list(items)
            items[pos] = {**item, "arguments": fixed}
    if stored:
        return items
    steps = plan_pairing(walk.units, walk.pairs.answer_of)
    if steps is None:
        return items
    return _paired(items, steps, ledger, walk, repairs)


def _paired(
    items: list[Any], steps: list[Step], ledger: HistoryLedger, walk: _Walk, repairs: RequestRepairs
) -> list[Any]:
    """The items in the order `steps` plan (`proxy.core.request_repair`)."""
    out: list[Any] = []
    for step in steps:
        if step.op == SYNTHETIC:
            call = ledger.calls[step.ordinal]
            repairs.missing_result(call.name)
            kind = (
                "custom_tool_call_output" if step.ordinal in walk.custom else "function_call_output"
            )
            out.append({"type": kind, "call_id": call.upstream_id, "output": MISSING_RESULT})
        elif step.op == KEEP:
            if step.moved:
                repairs.result_moved(ledger.calls[step.ordinal].name)
            out.append(items[step.unit])
        else:
            out.append(_marked_output(items[step.unit], step, ledger, repairs))
    return out


def _marked_output(
    item: dict[str, Any], step: Step, ledger: HistoryLedger, repairs: RequestRepairs
) -> dict[str, Any]:
    """An output item that answers no call, or a call already answered, as a user message."""
    if step.status == DUPLICATE:
        name = ledger.calls[step.ordinal].name
        repairs.duplicate_result(name)
    else:
        name = ""
        repairs.orphan_result()
    mark = marked_text(step.status, name)
    output = item.get("output")
    text = text_with_mark(mark, output)
    if text is not None:
        return {"type": "message", "role": "user", "content": text}
    if not isinstance(output, list):
        output = [{"type": "input_text", "text": dumps(output).decode()}]
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": mark}, *output],
    }


def _with_tool_schemas(body: dict[str, Any], repairs: RequestRepairs) -> dict[str, Any]:
    """SPEC §11: a function tool without parameters, or with empty ones, gets an empty object
    schema; `body` itself when none needs it."""
    return with_tools(body, repairs, _with_empty_schema)


def _with_empty_schema(tool: dict[str, Any]) -> dict[str, Any] | None:
    schema = object_schema(tool.get("parameters")) if tool.get("type") == "function" else None
    return None if schema is None else {**tool, "parameters": schema}


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


class _Walk:
    """What the walk tells the rest: each call or output item's call id, the last output's
    place, and for SPEC §11 the history as pairing units."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.targets: dict[int, str] = {}
        self.last_output = -1
        self.units: list[Unit] = []
        self.pairs = ResultPairs()
        self.call_items: list[int] = []  # where the call items are
        self.custom: set[int] = set()  # the ordinals of custom tool calls
        self._run: list[int] = []  # the calls of the run of model items being walked

    def end_run(self) -> None:
        """A run of model items ended: its last unit is the turn its outputs must follow."""
        if self._run:
            self.units[-1] = Unit(TURN, calls=self._run)
            self._run = []

    def call(self, pos: int, record: LedgerCall, custom: bool) -> None:
        self.targets[pos] = record.upstream_id
        self.call_items.append(pos)
        self._run.append(record.ordinal)
        if custom:
            self.custom.add(record.ordinal)

    def output(self, pos: int, record: LedgerCall | None) -> None:
        ordinal = -1 if record is None else record.ordinal
        self.units[-1] = Unit(RESULT, ordinal=ordinal, status=self.pairs.status(ordinal, pos))


def _walk(items: list[Any], ledger: HistoryLedger) -> _Walk:
    """Tell the ledger the history in order: the call id each call or output item must
    carry, and the last output item's position (-1: none)."""
    walk = _Walk(items)
    in_turn = False
    for pos, item in enumerate(items):
        model_made = is_model_made(item)
        if model_made and not in_turn:
            ledger.begin_turn()
        elif not model_made:
            walk.end_run()
        in_turn = model_made
        walk.units.append(Unit(OTHER))
        if not isinstance(item, dict):
            continue
        kind = item_type(item)
        if kind in CALL_TYPES:
            name, arguments = call_payload(item)
            record = ledger.call(normalize_raw_id(item.get("call_id")), name, arguments)
            walk.call(pos, record, kind == "custom_tool_call")
        elif kind in OUTPUT_TYPES:
            walk.last_output = pos
            answered = ledger.result(normalize_raw_id(item.get("call_id")), item.get("output"))
            walk.output(pos, answered)
            target = _output_target(answered, item.get("call_id"))
            if target is not None:
                walk.targets[pos] = target
        elif kind == "message" and item.get("role") == "user":
            ledger.user_input()
    walk.end_run()
    return walk


def _output_target(record: LedgerCall | None, call_id: object) -> str | None:
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
