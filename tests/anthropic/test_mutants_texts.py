"""SPEC §8: scanned text blocks (`texts.py`) at the edges the mutation audit found unpinned
(text sent in `content_block_start`, a start without text, empty and non-text deltas)."""

from __future__ import annotations

from typing import Any

from tests.anthropic.anthropic_wire import end, ev, parse, request, run, start, tool

JSON = dict[str, Any]
LS = {"command": "ls"}


def text_block(index: int, content_block: JSON, *deltas: JSON) -> bytes:
    return (
        ev({"type": "content_block_start", "index": index, "content_block": content_block})
        + b"".join(ev({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas)
        + ev({"type": "content_block_stop", "index": index})
    )


def test_text_sent_in_the_block_start_reaches_the_client() -> None:
    block = text_block(
        0, {"type": "text", "text": "Hello "}, {"type": "text_delta", "text": "world"}
    )
    got = run(request(), [start() + block + end("end_turn")]).read()
    assert got.message["content"] == [{"type": "text", "text": "Hello world"}]


def test_a_text_block_start_without_text_is_read_as_empty() -> None:
    block = text_block(0, {"type": "text"}, {"type": "text_delta", "text": "hi"})
    got = run(request(), [start() + block + end("end_turn")]).read()
    assert [b.get("text") for b in got.message["content"]] == ["hi"]


def test_an_empty_text_delta_opens_no_block() -> None:
    block = text_block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": ""})
    upstream = start() + block + tool(1, "toolu_01A", "Bash", LS) + end()
    got = run(request(), [upstream]).read()
    assert [b["type"] for b in got.message["content"]] == ["tool_use"]


def test_a_citation_delta_goes_on_in_the_open_text_block() -> None:
    citation = {"type": "citations_delta", "citation": {"type": "char_location", "cited_text": "x"}}
    block = text_block(
        3, {"type": "text", "text": ""}, {"type": "text_delta", "text": "hi"}, citation
    )
    client = run(request(), [start() + block + end("end_turn")]).client
    deltas = [e for n, e in parse(client) if n == "content_block_delta"]
    assert deltas[-1] == {"type": "content_block_delta", "index": 0, "delta": citation}


def test_a_citation_delta_already_at_its_index_goes_on_as_it_came() -> None:
    citation = {"type": "citations_delta", "citation": {"type": "char_location", "cited_text": "x"}}
    raw = ev({"type": "content_block_delta", "index": 0, "delta": citation})
    upstream = (
        start()
        + ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}})
        + raw
        + ev({"type": "content_block_stop", "index": 0})
        + end("end_turn")
    )
    assert raw in run(request(), [upstream]).client


def test_a_text_delta_whose_text_is_not_a_string_adds_nothing() -> None:
    block = text_block(
        0,
        {"type": "text", "text": ""},
        {"type": "text_delta", "text": 5},
        {"type": "text_delta", "text": "hi"},
    )
    got = run(request(), [start() + block + end("end_turn")]).read()
    assert got.message["content"] == [{"type": "text", "text": "hi"}]
