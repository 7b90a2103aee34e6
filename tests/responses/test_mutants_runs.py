"""SPEC §8: what the mutation audit found unpinned in the runs of a text part's deltas
(proxy/responses/runs.py): how far a run goes over texts with escapes, and that what it takes
is what parsing every event gives."""

from __future__ import annotations

import pytest

from tests.responses.helpers import Upstream
from tests.responses.test_runs import (
    FINAL,
    delta,
    message,
    numbered,
    runs_taken,
    same_as_parsed,
)

# Texts with every short escape orjson writes itself (`\n`, `\"`, `\\`, `\t`, `\b`, `\f`,
# `\r`): a run takes them as it takes plain text.
ESCAPED = ["a\nb", 'say "hi"', "back\\slash", "tab\there", "\b\f\r"]


@pytest.mark.parametrize("text", ESCAPED)
def test_a_run_takes_texts_with_the_short_escapes_orjson_writes(text: str) -> None:
    texts = ["one ", "two ", text, "three ", text, "four "]
    body = message(numbered(texts))
    # The lane's own delta opens it; the next is taken one by one, the run takes the rest.
    assert runs_taken([[body], [FINAL]])[0] == len(texts) - 1
    same_as_parsed([[body], [FINAL]])


def test_a_run_whose_first_text_begins_with_an_escape_records_its_text() -> None:
    """The text a run records (the scanner's, the final item's where the upstream never
    finishes it) is the escape's character, also where the run's first text begins with one."""
    texts = ["one ", "\nnext", "\ttab ", "three "]
    body = message(numbered(texts))  # the item is never done: its text is the one recorded
    assert runs_taken([[body], [FINAL]])[0] == len(texts) - 1
    same_as_parsed([[body], [FINAL]])


@pytest.mark.parametrize("number", [b"true", b"7.0", b"-7", b'"7"', b"1e1", b"x"])
def test_a_run_whose_first_number_is_not_an_integer_is_sent_as_its_parse_says(
    number: bytes,
) -> None:
    """The first event a run reads is numbered otherwise (its parts read before any proof)."""
    deltas = [*numbered(["one "]), delta(b"x", number, extra=b"}\n\n")]
    deltas += numbered(["three ", "four "], start=7)
    same_as_parsed([[message(deltas)], [FINAL]])


def test_a_run_of_deltas_without_a_sequence_number_is_sent_as_its_parse_says() -> None:
    """No event of the read after the lane's own has the number's key: the run's reader finds
    nothing to split at and leaves them to the general path."""
    bare = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    bare += b'"item_id":"msg_0","output_index":0,"content_index":0,"delta":"x"}\n\n'
    body = message([*numbered(["one "]), bare, bare])
    at = body.index(bare) + 2 * len(bare)  # the read ends after them
    same_as_parsed([[body[:at], body[at:]], [FINAL]])


def test_a_run_over_numbers_of_two_and_three_digits_is_taken_whole() -> None:
    """Numbers from 5 to 124 in one run: its texts are sliced by the numbers' widths."""
    texts = [f"w{i} " for i in range(120)]
    body = message(numbered(texts))
    assert runs_taken([[body], [FINAL]])[0] == len(texts) - 1
    same_as_parsed([[body], [FINAL]])


# -- OpenAI's order (the number first, an `obfuscation` copied): the general run reader -----


def openai_delta(number: bytes, text: bytes, copy: bytes) -> bytes:
    return (
        b"event: response.output_text.delta\ndata: "
        + b'{"type":"response.output_text.delta","sequence_number":'
        + number
        + b',"item_id":"msg_0","output_index":0,"content_index":0,"delta":"'
        + text
        + b'","logprobs":[],"obfuscation":"'
        + copy
        + b'"}\n\n'
    )


def openai_body(odd: bytes | None, at: int, start: int = 4) -> bytes:
    """The lane's own delta (numbered `start`), then deltas numbered on with `odd` at `at`."""
    numbers = range(start, start + 26)
    deltas = [openai_delta(b"%d" % n, b"w%d " % n, b"Zx%d" % n) for n in numbers]
    deltas[0] = openai_delta(b"%d" % start, b"plain ", b"Zx4")
    if odd is not None:
        deltas.insert(at, odd)
    head = Upstream().created().message(done=False).numbered_events()[:-1]
    return b"".join([*head, *deltas]) + Upstream(index=1).completed().body()


def test_an_openai_run_is_taken_whole() -> None:
    body = openai_body(None, 0)
    # 26 deltas: the lane's own, the next one by one, the run the other 24.
    assert runs_taken([[body]])[0] == 24
    same_as_parsed([[body]])


ODD_OPENAI = [
    openai_delta(b'15,"delta":"evil"', b"x", b"ab"),  # a key again in the number's hole
    openai_delta(b"true", b"x", b"ab"),
    openai_delta(b"015", b"x", b"ab"),
    openai_delta(b"9" * 19, b"x", b"ab"),
    openai_delta(b"15", b"x", b'a","delta":"evil'),
    openai_delta(b"15", b"x", b"a\\u0041"),
    openai_delta(b"15", b"\\nx", b"ab"),
    openai_delta(b"15", b"", b"ab"),
    openai_delta(b"15", b"\xff", b"ab"),
    openai_delta(b"15", b"x", b"\xff"),
    openai_delta(b"15", b"<x", b"ab"),
    openai_delta(b"16", b"x", b"ab"),
]


@pytest.mark.parametrize("at", [2, 11])
@pytest.mark.parametrize("odd", ODD_OPENAI)
def test_an_odd_value_in_an_openai_run_is_sent_as_its_parse_says(odd: bytes, at: int) -> None:
    body = openai_body(odd, at)
    same_as_parsed([[body]])


@pytest.mark.parametrize("start", [40, 6, 7, 70_000])
def test_a_run_numbered_otherwise_is_rebuilt_as_its_parse_says(start: int) -> None:
    """The upstream's numbers jump after the lane's first delta: the run goes out rebuilt on
    the client's template with the client's numbers."""
    deltas = [*numbered(["one "]), *numbered([f"w{i} " for i in range(12)], start=start)]
    body = message(deltas)
    assert runs_taken([[body], [FINAL]])[0] == 12
    same_as_parsed([[body], [FINAL]])
    same_as_parsed([[message(numbered(["one ", "two "]))], [body]])  # in a follow-up round


def test_a_follow_up_openai_run_numbered_as_the_client_is_rebuilt_on_its_template() -> None:
    """In a follow-up round the client's template differs (another `output_index`): a run is
    rebuilt on it even where the upstream's numbers happen to be the client's."""
    first = message(numbered(["one ", "two "]))
    for start in range(0, 40):
        same_as_parsed([[first], [openai_body(None, 0, start)]])


def test_a_run_with_its_number_between_its_text_and_a_copied_value_is_sent_as_parsed() -> None:
    """Another upstream's order (the text, the number, then an `obfuscation`): the run's
    numbers are found among three holes, not at the first."""
    deltas = [
        b"event: response.output_text.delta\ndata: "
        + b'{"type":"response.output_text.delta","item_id":"msg_0","output_index":0,'
        + b'"content_index":0,"delta":"'
        + (b"plain " if n == 4 else b"w%d " % n)
        + b'","sequence_number":%d,"obfuscation":"Zx%d"}\n\n' % (n, n)
        for n in range(4, 20)
    ]
    head = Upstream().created().message(done=False).numbered_events()[:-1]
    body = b"".join([*head, *deltas]) + Upstream(index=1).completed().body()
    assert runs_taken([[body]])[0] == len(deltas) - 2
    same_as_parsed([[body]])
    same_as_parsed([[message(numbered(["one ", "two "]))], [body]])  # renumbered
