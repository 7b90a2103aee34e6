"""The text-call scanner's shortcut (text that can neither start a marker nor complete what is
held goes out whole, without the stages) answers every feed exactly as the stages do."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.textcalls import Segment, TextCallScanner, markers
from proxy.core.textcalls import scanner as scanner_module
from proxy.core.textcalls.formats import MARKERS

OFFERED = frozenset({"Bash", "grep"})
# Pieces of every marker and of calls, with plain words in between, so that markers are
# split across feeds, held, completed and abandoned in every way.
FRAGMENTS = st.sampled_from(
    [
        "word ",
        " ",
        "\n",
        "é",
        "<",
        "[",
        "<tool",
        "_call>",
        "</tool_call>",
        '{"name": "Bash", "arguments": {"command": "ls"}}',
        '{"name"',
        "[TOOL_CALLS]",
        "[TOOL",
        "<|python_tag|>",
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>functions.Bash:0<|tool_call_argument_begin|>",
        '{"command": "ls"}<|tool_call_end|><|tool_calls_section_end|>',
        "<b>",
        "a[1]",
        "{",
    ]
)
PIECES = st.lists(st.lists(FRAGMENTS, max_size=4).map("".join), max_size=12)


def fed(pieces: list[str]) -> list[list[Segment]]:
    scanner = TextCallScanner(OFFERED)
    return [scanner.feed(piece) for piece in pieces] + [scanner.end()]


def test_every_marker_starts_with_a_character_the_shortcut_looks_for() -> None:
    assert all(markers.may_open(start[0]) for start in MARKERS)


@settings(max_examples=400, deadline=None)
@given(pieces=PIECES)
def test_the_shortcut_answers_each_feed_as_the_stages_do(pieces: list[str]) -> None:
    with mock.patch.object(scanner_module, "SHORTCUT", False):
        expected = fed(pieces)
    assert fed(pieces) == expected


@settings(max_examples=300, deadline=None)
@given(pieces=PIECES)
def test_text_that_passes_is_what_the_stages_release_whole(pieces: list[str]) -> None:
    """`passes` feeds a piece only when the stages would release it whole, and unchanged."""
    with mock.patch.object(scanner_module, "SHORTCUT", False):
        expected = fed(pieces)
    scanner = TextCallScanner(OFFERED)
    got = [
        ([piece] if piece else []) if scanner.passes(piece) else scanner.feed(piece)
        for piece in pieces
    ]
    assert [*got, scanner.end()] == expected


def test_the_shortcut_is_taken_for_plain_text_after_the_first_character() -> None:
    scanner = TextCallScanner(OFFERED)
    assert scanner.feed("Hello") == ["Hello"] and not scanner.holding
    staged = scanner.staged
    assert scanner.feed(" world") == [" world"]
    assert scanner.staged == staged  # the stages were not reached


def test_text_that_completes_a_held_marker_goes_through_the_stages() -> None:
    scanner = TextCallScanner(OFFERED)
    assert scanner.feed("see <tool") == ["see "] and scanner.holding
    assert scanner.feed("s here") == ["<tools here"]


def test_the_switch_sends_plain_text_through_the_stages() -> None:
    """The tests above compare with the shortcut off: off, it is really not taken."""
    scanner = TextCallScanner(OFFERED)
    with mock.patch.object(scanner_module, "SHORTCUT", False):
        assert scanner.feed("Hello") == ["Hello"] and not scanner.holding
        assert scanner.feed(" world") == [" world"]
    assert scanner.staged == 2
