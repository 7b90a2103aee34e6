"""The text-call scanner's work grows linearly with its input, however the input is split.

Work is counted, not timed: the scanner counts every character it looks at (`examined`,
summed over its searches, checks, joins and parses). Quadratic scanning (re-searching or
re-joining the held text on every piece, as the scanner once did: 0.66 s of CPU for one
250,000-character block) shows as a ratio near 16 between the 1 MB and the 250 KB input;
linear as at most 4, and every input stays within a small constant times its length.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest

from proxy.core.textcalls import RecoveredCall, TextCallScanner
from proxy.core.textcalls.formats import MARKERS
from proxy.simulator.profiles import LEAK_FORMATS, WHOLE_MESSAGE_LEAKS, PlannedCall, leak_markup

SMALL, LARGE = 250_000, 1_000_000
PER_CHAR = 12  # examined characters per input character, at most (the worst input: 10.4)
OFFERED = frozenset({"read_file"})
CALL = (PlannedCall("read_file", '{"path": "/tmp/x.txt"}', None),)


def one_char(text: str) -> Iterator[str]:
    return iter(text)


def realistic(text: str) -> Iterator[str]:
    """Pieces of 1 to 20 characters, as a server streams tokens."""
    rng = random.Random(len(text))
    pos = 0
    while pos < len(text):
        step = rng.randint(1, 20)
        yield text[pos : pos + step]
        pos += step


def whole(text: str) -> Iterator[str]:
    yield text


def scan(text: str, split: Callable[[str], Iterator[str]]) -> tuple[int, str, int]:
    """(characters examined, text released, calls recovered)."""
    scanner = TextCallScanner(OFFERED)
    out = []
    for piece in split(text):
        out += scanner.feed(piece)
    out += scanner.end()
    released = "".join(s for s in out if isinstance(s, str))
    return scanner.examined, released, sum(isinstance(s, RecoveredCall) for s in out)


def repeat(unit: str, size: int) -> str:
    return unit * (size // len(unit) + 1)


def long_call(size: int) -> str:
    return (
        '<tool_call>{"name": "read_file", "arguments": {"path": "' + "x" * size + '"}}</tool_call>'
    )


# Inputs of the size asked for (or a little over), by kind.
INPUTS: dict[str, Callable[[int], str]] = {
    "prose": lambda n: repeat("a < b and [c] <t| x ", n),
    "one long call": long_call,
    "one whole-message call": lambda n: (
        '{"name": "read_file", "arguments": {"p": "' + "y" * n + '"}}'
    ),
    "nested unclosed starts": lambda n: repeat('<tool_call>{"a": ', n),
    "failing blocks": lambda n: repeat('<tool_call>{"name": "rm"}</tool_call> ', n),
    "marker then names": lambda n: repeat("<tool_call>name" + "n" * 300, n),
}
for marker in MARKERS:  # a block that never ends, for every marker
    INPUTS[f"unclosed {marker}"] = lambda n, m=marker: m + "{" + "z" * n
# Calls of every format, one after another: each is parsed, so these are smaller inputs
# (the ratio between the two sizes is what tells linear from quadratic).
FORMAT_SIZES = (SMALL // 5, LARGE // 5)
CALLS_OF = {
    fmt: (lambda n, f=fmt: repeat("Text. " + leak_markup(f, CALL), n))
    for fmt in LEAK_FORMATS
    if fmt not in WHOLE_MESSAGE_LEAKS
}


def check_linear(
    make: Callable[[int], str],
    split: Callable[[str], Iterator[str]],
    sizes: tuple[int, int] = (SMALL, LARGE),
) -> None:
    small_text, large_text = make(sizes[0]), make(sizes[1])
    small, _, _ = scan(small_text, split)
    large, large_released, calls = scan(large_text, split)
    assert small <= PER_CHAR * len(small_text)
    assert large <= PER_CHAR * len(large_text)
    assert large <= 4.5 * small, (small, large)
    if not calls:  # nothing is ever dropped
        assert large_released == large_text


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_work_is_linear_at_realistic_splits(name: str) -> None:
    check_linear(INPUTS[name], realistic)


@pytest.mark.parametrize("fmt", sorted(CALLS_OF))
def test_work_is_linear_for_calls_of_every_format(fmt: str) -> None:
    check_linear(CALLS_OF[fmt], realistic, FORMAT_SIZES)


@pytest.mark.parametrize("name", ["one long call", "prose"])
def test_work_is_linear_one_character_at_a_time(name: str) -> None:
    check_linear(INPUTS[name], one_char)


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_work_is_linear_in_one_piece(name: str) -> None:
    check_linear(INPUTS[name], whole)


@pytest.mark.parametrize("split", [one_char, realistic, whole])
def test_calls_are_recovered_at_every_split(split: Callable[[str], Iterator[str]]) -> None:
    text = CALLS_OF["hermes"](FORMAT_SIZES[0])
    _, released, calls = scan(text, split)
    assert calls == text.count("<tool_call>")
    assert released == "Text. " * calls


def test_the_counter_counts_what_a_quadratic_scan_would_cost() -> None:
    # The same long call fed in two pieces and in 10,000: a scan that went over the held block
    # again for every piece would examine about 5,000 times more in the second case.
    text = long_call(SMALL)
    two = scan(text, lambda t: iter((t[: len(t) // 2], t[len(t) // 2 :])))[0]
    many = scan(text, lambda t: (t[i : i + 25] for i in range(0, len(t), 25)))[0]
    assert two >= len(text)  # every character was looked at
    assert many <= 2 * two
