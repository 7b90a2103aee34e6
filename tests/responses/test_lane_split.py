"""A text lane's event, written once with marks in its holes (`lane._split`), against the
event written key by key with nothing in them (`lane._split_by_key`, what `_split` falls back
to): the same pieces, holes and sequence-number tail for any event a parser gives."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.jsontext import dumps
from proxy.responses import lane

_MARK_TEXTS = list(lane._MARKS.values())
_STRINGS = st.one_of(st.text(max_size=12), st.sampled_from([*_MARK_TEXTS, '"', "\\", ":", ""]))
# Integers orjson writes: past 64 bits `dumps` writes the whole value the stdlib's way (floats
# too: `1e-05`), and the event written once then differs from key by key, as the general
# path's own writing of the whole event does (`test_past_64_bits_as_the_event_is_written`).
_INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_SCALARS = st.one_of(st.none(), st.booleans(), _INTS, st.floats(), _STRINGS)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_STRINGS, inner, max_size=3)
    ),
    max_leaves=8,
)
_KEYS = st.one_of(st.sampled_from(["type", "item_id", "output_index", *lane._HOLES]), _STRINGS)


@st.composite
def _events(draw: st.DrawFn) -> dict[str, Any]:
    return draw(st.dictionaries(_KEYS, _VALUES, max_size=7))


@settings(max_examples=400, deadline=None)
@given(_events())
def test_written_once_is_written_key_by_key(event: dict[str, Any]) -> None:
    assert lane._split(event) == lane._split_by_key(event)


def test_a_value_holding_a_mark_falls_back_and_still_agrees() -> None:
    for mark in _MARK_TEXTS:
        event = {"type": "t", "delta": "x", "sequence_number": 3, "note": [mark], mark: 1}
        assert lane._split(event) == lane._split_by_key(event)


def test_the_holes_are_the_emptied_pieces_in_key_order() -> None:
    event = {"sequence_number": 7, "type": "t", "delta": "hi", "obfuscation": "zz"}
    parts, holes, tail = lane._split(event)
    assert b'"'.join(parts) == b'{"sequence_number""type":"t","delta":"","obfuscation":""}'
    assert holes == [2, 9, 13] and tail == b","
    assert all(parts[at] == b"" for at in holes)


def test_past_64_bits_as_the_event_is_written() -> None:
    # The general path writes the whole event with one `dumps` (carry.encode): the lane's
    # pieces are that writing's, with its holes emptied.
    event = {"type": "t", "big": [2**70], "small": 1e-05, "delta": "x", "sequence_number": 1}
    parts, holes, _ = lane._split(event)
    written = dumps({**event, "delta": "", "sequence_number": 0})
    assert b'"'.join(parts) == written.replace(b":0}", b"")  # its tail kept apart
    assert b"1e-05" in written and holes == [11, 14]
