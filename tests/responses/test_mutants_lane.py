"""SPEC §8: what the mutation audit found unpinned in a text part's lane
(proxy/responses/lane.py): deltas numbered before their text without a copied value, OpenAI's
obfuscated deltas taken one by one without a parse, and a read cut just before a blank line."""

from __future__ import annotations

from unittest import mock

import orjson

from tests.responses.helpers import Upstream
from tests.responses.test_mutants_runs import openai_delta
from tests.responses.test_runs import FINAL, message, numbered, outcome, same_as_parsed


def number_first(n: int, text: bytes) -> bytes:
    """A delta with its number before its text and no `obfuscation`."""
    return (
        b"event: response.output_text.delta\ndata: "
        + b'{"type":"response.output_text.delta","sequence_number":%d,' % n
        + b'"item_id":"msg_0","output_index":0,"content_index":0,"delta":"'
        + text
        + b'"}\n\n'
    )


def with_head(deltas: list[bytes]) -> bytes:
    head = Upstream().created().message(done=False).numbered_events()[:-1]
    return b"".join([*head, *deltas]) + Upstream(index=1).completed().body()


def test_deltas_numbered_before_their_text_are_sent_as_their_parse_says() -> None:
    body = with_head([number_first(n, b"w%d " % n) for n in range(4, 12)])
    same_as_parsed([[body]])
    same_as_parsed([[body[:k], body[k:]] for k in range(len(body) - 600, len(body), 97)][0:1])


def test_obfuscated_deltas_one_per_read_are_taken_without_a_parse() -> None:
    """OpenAI's deltas, each in a read of its own: the lane takes each from its bytes (its
    `obfuscation` copied as it came)."""
    deltas = [openai_delta(b"%d" % n, b"w%d " % n, b"Zx%d" % n) for n in range(4, 24)]
    body = with_head(deltas)
    first = body.index(deltas[1])
    reads = [body[:first], *deltas[1:], body[first + sum(map(len, deltas[1:])) :]]
    with mock.patch("proxy.responses.stream.orjson.loads", wraps=orjson.loads) as loads:
        outcome([reads])
    # The head's events, the lane's first delta and the end's: none of the 19 after it.
    assert loads.call_count <= 10
    same_as_parsed([reads])


def test_a_read_cut_just_before_a_delta_s_blank_line_is_sent_as_its_parse_says() -> None:
    body = message(numbered(["one ", "two ", "three "]))
    end = body.index(b"}\n\n", body.rindex(b'"delta":"three ')) + 1
    for k in range(end - 3, end + 3):
        same_as_parsed([[body[:k], body[k:]], [FINAL]])
