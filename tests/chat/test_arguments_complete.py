"""SPEC §4 "a call is open until its arguments form a complete JSON value", asked after every
fragment: the same answer as parsing all the arguments each time, for work linear in their
length (a call's `work` counts every character the core scans, joins, compares or parses for
its arguments)."""

from __future__ import annotations

import json
import os

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.chat.calls import CallSlot, ChoiceCalls
from proxy.chat.history import HistoryFacts
from proxy.core.decide import ResponseIds
from proxy.core.guard import GuardState
from proxy.core.jsoncomplete import JsonCompleteness, Progress, is_complete_json
from proxy.core.notes import Note

EXAMPLES = int(os.environ.get("CORE_PROPERTY_EXAMPLES", "120"))


def reparse_each_time(fragments: list[str]) -> list[bool]:
    """The definition the stream used before it was incremental: after a fragment whose last
    non-whitespace character closes a bracket, all the arguments parse; once true, true."""
    text, complete, answers = "", False, []
    for fragment in fragments:
        text += fragment
        if not complete and fragment.rstrip()[-1:] in ("}", "]"):
            complete = is_complete_json(text)
        answers.append(complete)
    return answers


def incremental(fragments: list[str]) -> list[bool]:
    slot = CallSlot()
    answers = []
    for fragment in fragments:
        slot.add_arguments(fragment)
        answers.append(slot.complete)
    return answers


def split_at(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(text[start:point])
        start = point
    pieces.append(text[start:])
    return pieces


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet='ab"\\{}[]:, \n\u2028é'),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(alphabet='k"\\{}', max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)
# Arbitrary text made of what matters to the scan: brackets, quotes, escapes, and whitespace
# that JSON allows (space, \t, \n, \r) or does not (\x0c, \xa0, \u2028).
jsonish = st.text(alphabet='{}[]"\\:,ab1 \t\n\r\x0c\xa0\u2028', max_size=40)


@st.composite
def argument_texts(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["value", "padded", "junk", "prefix", "two"]))
    value = json.dumps(draw(json_values), ensure_ascii=draw(st.booleans()))
    if kind == "value":
        return value
    if kind == "padded":
        pad = st.text(alphabet=" \t\n\r\x0c\xa0", max_size=3)
        return draw(pad) + value + draw(pad)
    if kind == "junk":
        return draw(jsonish)
    if kind == "prefix":
        return value[: draw(st.integers(0, len(value)))] + draw(jsonish)
    return value + draw(st.sampled_from(["", " ", "\n"])) + value


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(argument_texts(), st.lists(st.integers(0, 200), max_size=12))
def test_complete_after_each_fragment_as_if_all_were_parsed_again(
    text: str, cuts: list[int]
) -> None:
    fragments = split_at(text, cuts)
    assert incremental(fragments) == reparse_each_time(fragments)
    one_char_each = list(text)
    assert incremental(one_char_each) == reparse_each_time(one_char_each)


@pytest.mark.parametrize(
    ("fragments", "complete"),
    [
        (['{"a": "x}', '"}'], [False, True]),  # a bracket inside a string closes nothing
        (['{"a": "\\', '"}', '"}'], [False, False, True]),  # an escape split from its quote
        (['{"a": [1, {"b": 2}', "]", "}"], [False, False, True]),
        (["  [1, 2]\n"], [True]),
        (["{}", "{}"], [True, True]),  # complete stays complete
        (["{} {", "}"], [False, False]),  # two values are never one
        (["{a}", "}"], [False, False]),  # closed but not JSON: never
        (['"text"', "}"], [False, False]),  # a top-level scalar waits for the finish
        (["5"], [False]),
    ],
)
def test_completeness_cases(fragments: list[str], complete: list[bool]) -> None:
    assert incremental(fragments) == complete == reparse_each_time(fragments)


def test_the_scan_stops_for_good_once_nothing_can_complete() -> None:
    tracker = JsonCompleteness()
    assert tracker.feed('{"a":1} x') is Progress.NEVER
    assert tracker.feed("}" * 100) is Progress.NEVER
    assert tracker.examined == len('{"a":1} x')


# -- work grows linearly ----------------------------------------------------------------------


def nested_arguments(size: int) -> str:
    """Arguments as agents send them for a large edit: many small objects, so a fragment very
    often ends in `}` (where a re-parse of everything used to happen), strings with escapes."""
    item = '{"line": %d, "text": "x = {\\"k\\": [1, 2]}  # }"}'
    parts, total, n = [], 0, 0
    while total < size:
        piece = item % n
        parts.append(piece)
        total += len(piece) + 1
        n += 1
    return '{"path": "src/app.py", "edits": [' + ",".join(parts) + "]}"


def slot_work(fragments: list[str]) -> tuple[int, bool]:
    """What a call's slot does per fragment on the stream's path: the final-flush check, then
    the fragment joins the arguments."""
    slot = CallSlot()
    for fragment in fragments:
        slot.is_flush(fragment)
        slot.add_arguments(fragment)
    return slot.work, slot.complete


KB = 1024
MB = 1024 * KB


def test_one_character_at_a_time_the_work_grows_linearly() -> None:
    small, large = nested_arguments(256 * KB), nested_arguments(1 * MB)
    small_work, small_complete = slot_work(list(small))
    large_work, large_complete = slot_work(list(large))
    assert small_complete and large_complete
    # Each character is scanned once, the arguments joined and parsed once at the end.
    assert large_work <= 4 * len(large)
    assert large_work / small_work < 1.05 * len(large) / len(small)


def realistic_fragments(text: str) -> list[str]:
    """Cuts of 1 to 64 characters, half of them right after a `}` (servers flush at tokens)."""
    pieces, start, step = [], 0, 0
    while start < len(text):
        step = (step * 7 + 5) % 1009
        end = start + 1 + step % 64
        if step % 2:
            brace = text.find("}", start, end + 64)
            end = brace + 1 if brace != -1 else end
        pieces.append(text[start:end])
        start = end
    return pieces


def calls_work(fragments: list[str]) -> tuple[int, str]:
    """A streamed call through the routing, flush check and header of a choice."""
    notes: list[Note] = []
    ids = ResponseIds(HistoryFacts(), "auto", GuardState(), lambda: "beef")
    calls = ChoiceCalls(0, ids.choice(0), ids, notes)
    sent = []
    header = {"index": 0, "id": "call_Xq3bV9kLm2Np4Rs6Tu8Wy0Za", "function": {"name": "edit"}}
    for delta in [header] + [{"index": 0, "function": {"arguments": f}} for f in fragments]:
        for out in calls.take([delta]):
            sent.append(out["function"]["arguments"])
    (slot,) = calls.slots
    return slot.work, "".join(sent)


def test_realistic_fragments_the_work_grows_linearly() -> None:
    small, large = nested_arguments(256 * KB), nested_arguments(1 * MB)
    small_work, small_sent = calls_work(realistic_fragments(small))
    large_work, large_sent = calls_work(realistic_fragments(large))
    assert (small_sent, large_sent) == (small, large)
    assert orjson.loads(large_sent)["edits"][-1]["text"] == 'x = {"k": [1, 2]}  # }'
    assert large_work <= 4 * len(large)
    assert large_work / small_work < 1.05 * len(large) / len(small)


# -- the value the completing parse found (the replay check compares it, not a second parse) --


def test_a_call_found_complete_carries_what_its_arguments_hold() -> None:
    slot = CallSlot()
    for fragment in ['{"command": ', '"ls -la ', 'src"', ', "n": [1, 2.5]}']:
        slot.add_arguments(fragment)
    assert slot.complete
    assert slot.value == {"command": "ls -la src", "n": [1, 2.5]}


def test_the_value_is_dropped_when_the_arguments_change_or_never_parsed() -> None:
    from proxy.core.decide import UNPARSED

    open_slot = CallSlot()
    open_slot.add_arguments('{"a": 1')
    assert open_slot.value is UNPARSED
    broken = CallSlot()
    broken.add_arguments('{"a": 1,}')  # closes its bracket but does not parse
    assert not broken.complete and broken.value is UNPARSED
    changed = CallSlot()
    changed.add_arguments('{"a": 1}')
    changed.add_arguments("  ")  # appended after it was complete: parsed again when decided
    assert changed.complete and changed.value is UNPARSED
    replaced = CallSlot()
    replaced.add_arguments('{"a": 1}')
    replaced.set_arguments("{}")
    assert replaced.value is UNPARSED


@pytest.mark.parametrize("arguments", ['{"b": 2, "a": 1}', '{"a":1,"b":2}'])
def test_a_replay_is_matched_the_same_from_the_carried_value(arguments: str) -> None:
    # The answered call's fingerprint is of {"a": 1, "b": 2}; the same arguments in any
    # key order or spacing are its replay, with the value carried or parsed from the text.
    from proxy.core.ledger import HistoryLedger

    ledger = HistoryLedger("kimi")
    ledger.call("functions.edit:0", "edit", '{"a": 1, "b": 2}')
    assert ledger.result("functions.edit:0") is not None
    for parsed in (orjson.loads(arguments), None):
        ids = ResponseIds(ledger.facts(), "auto", GuardState(), lambda: "beef")
        slot = CallSlot()
        slot.name_ = "edit"
        slot.add_arguments(arguments)
        decision = (
            ids.decide(ids.choice(0), "functions.edit:0", slot, parsed)
            if parsed is not None
            else ids.decide(ids.choice(0), "functions.edit:0", slot)
        )
        assert decision.verdict.name == "REPLAY"
