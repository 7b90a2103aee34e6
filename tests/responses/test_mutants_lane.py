"""SPEC §8: what the mutation audit found unpinned in a text part's lane
(proxy/responses/lane.py): deltas numbered before their text without a copied value, OpenAI's
obfuscated deltas taken one by one without a parse, and a read cut just before a blank line."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest

from proxy.core.textcalls import TextCallScanner
from tests.responses.helpers import Upstream, event, request, run
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
    with mock.patch("proxy.core.nonjson.orjson.loads", wraps=orjson.loads) as loads:
        outcome([reads])
    # The head's events, the lane's first delta and the end's: none of the 19 after it.
    assert loads.call_count <= 10
    same_as_parsed([reads])


def test_a_read_cut_just_before_a_delta_s_blank_line_is_sent_as_its_parse_says() -> None:
    body = message(numbered(["one ", "two ", "three "]))
    end = body.index(b"}\n\n", body.rindex(b'"delta":"three ')) + 1
    for k in range(end - 3, end + 3):
        same_as_parsed([[body[:k], body[k:]], [FINAL]])


def _plain_delta(n: int, **values: object) -> bytes:
    fields = {"item_id": "msg_0", "output_index": 0, "content_index": 0, **values}
    return event("response.output_text.delta", **fields, sequence_number=n)


@pytest.mark.parametrize("first", [None, 7, ["x"]])
def test_a_part_whose_first_delta_is_not_a_string_opens_no_lane(first: object) -> None:
    """Without offered tools (no scanner), a part's first delta whose `delta` is not a
    string has no text to keep: it reaches the client as sent, and the string deltas after
    it are the part's text."""
    deltas = [_plain_delta(4, delta=first), *(_plain_delta(n, delta=f"w{n} ") for n in (5, 6, 7))]
    result = run(request(tools=[]), with_head(deltas))
    sent = [e["delta"] for e in result.events if e["type"] == "response.output_text.delta"]
    assert sent == [first, "w5 ", "w6 ", "w7 "]
    done = result.events[-1]["response"]["output"][0]
    assert done["content"][0]["text"] == "w5 w6 w7 "


@pytest.mark.parametrize("copy", [None, 7, True, {"k": "v"}, ["a"]])
def test_deltas_whose_obfuscation_is_not_a_string_reach_the_client_as_sent(copy: object) -> None:
    """OpenAI's `obfuscation` is a string; another value is copied as it came, in every
    delta of the part, whether or not the lane could take them."""
    deltas = [_plain_delta(n, delta=f"w{n} ", obfuscation=copy) for n in range(4, 12)]
    body = with_head(deltas)
    same_as_parsed([[body]])
    events = run(request(), body).events
    copies = [e["obfuscation"] for e in events if e["type"] == "response.output_text.delta"]
    assert copies == [copy] * 8


class _Counted:
    """A part's scanner that records the text it is handed: fed, or passed whole."""

    def __init__(self, offered: frozenset[str], seen: list[str]) -> None:
        self._scanner = TextCallScanner(offered)
        self._seen = seen

    def feed(self, text: str) -> Any:
        self._seen.append(text)
        return self._scanner.feed(text)

    def passes(self, text: str) -> bool:
        passed = self._scanner.passes(text)
        if passed:
            self._seen.append(text)
        return passed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scanner, name)


def test_the_scanner_is_handed_each_character_of_a_long_answer_once() -> None:
    """With offered tools every delta's text goes through the part's markup scanner: fed (the
    general path) or passed whole (a lane's delta, a run's texts), once each (SPEC §8)."""
    words = [f"word{i} " for i in range(120)]
    body = Upstream().created().message(*words).completed().numbered()
    reads = [body[k : k + 4096] for k in range(0, len(body), 4096)]
    seen: list[str] = []
    # The scanners are made in the Responses module (the scanner itself may be compiled).
    with mock.patch(
        "proxy.responses.textcalls.TextCallScanner", lambda offered: _Counted(offered, seen)
    ):
        outcome([reads])
    assert "".join(seen) == "".join(words)
