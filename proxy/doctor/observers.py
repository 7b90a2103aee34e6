"""Each quirk spotted in the raw responses (views.py), named by its code in quirks.py.

An observer looks at every chat response of the run, in order, and yields a `Sighting` (which
quirk, in which response, an example) per thing it sees. Most look at one response at a
time; `recurring_ids` and `replays` compare turns. Id shapes are judged by the proxy's own
rules (proxy.core.ids), leaked markup by its own parser (proxy.core.textcalls).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import orjson

from proxy.chat.stream import is_complete_json
from proxy.core.ids import fingerprint, is_counter_shaped, is_valid_client_id, normalize_raw_id
from proxy.core.textcalls import RecoveredCall, TextCallScanner
from proxy.doctor.quirks import QUIRKS, Quirk
from proxy.doctor.script import TOOLS
from proxy.doctor.views import RawCall, ResponseView

# `functions.{name}:{n}` as Kimi's parsers mint them, or the `{name}:{n}` of hosted Kimi APIs.
_KIMI_ID = re.compile(r"(?:functions\.)?(?P<name>[\w.-]+):\d+")
_OFFERED = frozenset(tool["function"]["name"] for tool in TOOLS)
_EXAMPLE_CHARS = 80


@dataclass(frozen=True, slots=True)
class Sighting:
    code: str
    where: str  # the response's label, e.g. "streaming turn 2"
    example: str


@dataclass
class Finding:
    quirk: Quirk
    where: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)


Example = tuple[str, str]  # (quirk code, example)


def _short(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= _EXAMPLE_CHARS else text[: _EXAMPLE_CHARS - 1] + "…"


def _quoted(raw_id: str) -> str:
    return orjson.dumps(_short(raw_id)).decode()


def _call_name(call: RawCall) -> str:
    return call.name or "a call"


# -- one response at a time ------------------------------------------------------------------


def _id_presence(call: RawCall) -> Iterator[Example]:
    values = [entry["id"] for entry in call.entries if "id" in entry]
    if call.first_id is None:
        empty = any(value == "" for value in values)
        yield ("empty_ids" if empty else "missing_ids", f"{_call_name(call)} had no usable id")
    if any(isinstance(v, int) and not isinstance(v, bool) for v in values):
        yield "integer_ids", f"{_call_name(call)}: id {_short(values[0])}"
    if any(value == "null" for value in values[1:]):
        yield (
            "null_string_ids",
            f'{_call_name(call)}: "null" after id {_quoted(call.first_id or "")}',
        )
    distinct = {normalize_raw_id(value) for value in values} - {None}
    if len(distinct) > 1:
        yield "changing_ids", f"{_call_name(call)}: " + ", ".join(sorted(map(str, distinct))[:3])


def _id_shape(call: RawCall) -> Iterator[Example]:
    raw_id = call.first_id
    if raw_id is None:
        return
    kimi = _KIMI_ID.fullmatch(raw_id)
    if kimi is not None and kimi.group("name") == call.name:
        yield "kimi_ids", _quoted(raw_id)
    elif not is_valid_client_id(raw_id):
        yield "invalid_ids", _quoted(raw_id)
    elif is_counter_shaped(raw_id):
        yield "counter_ids", _quoted(raw_id)


def _repeated_fields(call: RawCall) -> Iterator[Example]:
    first_id = call.first_id
    repeated = set()
    for entry in call.entries[1:]:
        if first_id is not None and normalize_raw_id(entry.get("id")) == first_id:
            repeated.add("id")
        if entry.get("type") is not None:
            repeated.add("type")
        fn = entry.get("function")
        if isinstance(fn, dict) and fn.get("name"):
            repeated.add("name")
    if repeated:
        fields = ", ".join(f"`{name}`" for name in ("id", "type", "name") if name in repeated)
        yield "repeated_fields", f"{fields} on later deltas of {_call_name(call)}"


def _arguments(call: RawCall, streamed: bool) -> Iterator[Example]:
    fragments = call.fragments
    if any(isinstance(part, dict | list) for part in fragments):
        yield "object_arguments", f"{_call_name(call)}: {_short(fragments[0])}"
    if not call.arguments_text().strip():
        yield "empty_arguments", f"{_call_name(call)}: {_short(fragments or 'no arguments key')}"
    texts = [part for part in fragments if isinstance(part, str)]
    if streamed and len(texts) > 2:
        before, last = "".join(texts[:-1]), texts[-1]
        if is_complete_json(before) and last.strip() and last.startswith(before):
            yield "final_flush", f"{_call_name(call)}: {_short(before)} then {_short(last)}"


def _per_call(view: ResponseView) -> Iterator[Example]:
    for call in view.calls:
        yield from _id_presence(call)
        yield from _id_shape(call)
        yield from _arguments(call, view.streamed)
        if view.streamed:
            yield from _repeated_fields(call)
        head = call.entries[0]
        if head.get("type") is None:
            yield "missing_type", f"{_call_name(call)}: {_short(head)}"
    ids = Counter(call.first_id for call in view.calls if call.first_id is not None)
    for raw_id, count in ids.items():
        if count > 1:
            yield "duplicate_ids", f"{raw_id} on {count} calls"


def _indexes(view: ResponseView) -> Iterator[Example]:
    if not view.streamed or not view.calls:
        return
    entries = [entry for call in view.calls for entry in call.entries]
    indexes = [entry.get("index") for entry in entries]
    if any(not isinstance(index, int) or isinstance(index, bool) for index in indexes):
        yield "missing_index", f"{sum(1 for i in indexes if not isinstance(i, int))} deltas"
        return
    if len(view.calls) > 1 and set(indexes) == {0}:
        yield "parallel_one_index", f"{len(view.calls)} calls, every delta at index 0"
        return
    firsts = sorted({call.entries[0]["index"] for call in view.calls})
    if firsts != list(range(len(firsts))):
        yield "sparse_index", f"indexes {firsts}"


def _finishing(view: ResponseView) -> Iterator[Example]:
    if view.stream_error is not None:
        return  # an error event ends a stream without finish_reason or [DONE], rightly
    reasons = view.finish_reasons
    if view.calls and "stop" in reasons:
        yield "stop_after_calls", f"{len(view.calls)} calls, then finish_reason stop"
    if not view.calls and "tool_calls" in reasons:
        yield "tool_calls_without_calls", "finish_reason tool_calls, no call"
    if view.choices_seen and not reasons:
        yield "no_finish_reason", "no finish_reason in the response"
    if view.streamed and view.choices_seen and not view.done:
        yield "no_done", "the stream ended without [DONE]"


def _framing(view: ResponseView) -> Iterator[Example]:
    if view.comments:
        yield "keep_alives", _short(view.comments[0].decode("utf-8", "replace"))
    if view.non_json:
        yield "non_json_data", "data: " + _short(view.non_json[0].decode("utf-8", "replace"))
    if view.crlf or view.data_without_space:
        parts = ["\\r\\n line ends"] * view.crlf + ["data: without a space"] * (
            view.data_without_space
        )
        yield "crlf_framing", ", ".join(parts)


def _leaked_markup(view: ResponseView) -> Iterator[Example]:
    if not view.content:
        return
    scanner = TextCallScanner(_OFFERED)
    segments = [*scanner.feed(view.content), *scanner.end()]
    formats = sorted({s.format for s in segments if isinstance(s, RecoveredCall)})
    if formats:
        yield "leaked_markup", f"{', '.join(formats)} markup: {_short(view.content.strip())}"


PER_RESPONSE: tuple[Callable[[ResponseView], Iterator[Example]], ...] = (
    _per_call,
    _indexes,
    _finishing,
    _framing,
    _leaked_markup,
)


# -- across turns ----------------------------------------------------------------------------


def places(labels: Sequence[str]) -> str:
    """["streaming turn 1", "streaming turn 2", "non-streaming turn 1"] ->
    "streaming turns 1, 2; non-streaming turn 1"."""
    turns: dict[str, list[str]] = {}
    for label in labels:
        conversation, _, turn = label.rpartition(" turn ")
        turns.setdefault(conversation, []).append(turn)
    return "; ".join(
        f"{conversation} turn{'s' if len(numbers) > 1 else ''} {', '.join(numbers)}"
        for conversation, numbers in turns.items()
    )


def _recurring_ids(views: Sequence[ResponseView]) -> Iterator[Sighting]:
    seen: dict[str, list[str]] = {}
    for view in views:
        for call in view.calls:
            if call.first_id is not None:
                labels = seen.setdefault(call.first_id, [])
                if view.label not in labels:
                    labels.append(view.label)
    for raw_id, labels in seen.items():
        if len(labels) > 1:
            for label in labels:
                yield Sighting("recurring_ids", label, f"{_quoted(raw_id)} in {places(labels)}")


def _replays(views: Sequence[ResponseView]) -> Iterator[Sighting]:
    """A call with the name and arguments of one answered in an earlier turn of the same
    conversation (the doctor answered every call it received)."""
    answered: dict[str, dict[tuple[str, str], str | None]] = {}
    for view in views:
        earlier = answered.setdefault(view.exchange.conversation, {})
        now = {}
        for call in view.calls:
            key = fingerprint(_call_name(call), call.arguments_text())
            if key in earlier:
                same = "the same id" if earlier[key] == call.first_id else "another id"
                yield Sighting(
                    "replay", view.label, f"{key[0]} {_short(key[1])} again, under {same}"
                )
            now[key] = call.first_id
        earlier.update(now)


ACROSS_TURNS: tuple[Callable[[Sequence[ResponseView]], Iterator[Sighting]], ...] = (
    _recurring_ids,
    _replays,
)


def observe(views: Sequence[ResponseView]) -> list[Finding]:
    """Every quirk seen, in the catalogue's order, with where and a few examples."""
    sightings = [
        Sighting(code, view.label, example)
        for view in views
        for observer in PER_RESPONSE
        for code, example in observer(view)
    ]
    sightings += [s for observer in ACROSS_TURNS for s in observer(views)]
    findings: dict[str, Finding] = {}
    for sighting in sightings:
        finding = findings.setdefault(sighting.code, Finding(QUIRKS[sighting.code]))
        if sighting.where not in finding.where:
            finding.where.append(sighting.where)
        if sighting.example not in finding.examples and len(finding.examples) < 2:
            finding.examples.append(sighting.example)
    return [findings[code] for code in QUIRKS if code in findings]
