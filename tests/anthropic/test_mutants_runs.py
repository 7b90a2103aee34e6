"""SPEC §8: runs of plain text deltas taken from their bytes (`runs.py`) at an edge the
mutation audit found unpinned: a delta at another index after a run, alone in the part of
the read the run's end is looked for in."""

from __future__ import annotations

import pytest

from tests.anthropic.anthropic_wire import end, ev, request, run, start

PIECE = "plain text "


def delta(index: int) -> bytes:
    return ev(
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": PIECE},
        }
    )


@pytest.mark.parametrize("before", range(1, 40))
def test_a_last_delta_at_another_index_is_not_taken_into_the_run(before: int) -> None:
    # However many lane deltas come first, the last (at another index) begins a region of
    # the read, or its rest, made only of events that are not the lane's.
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    deltas = [delta(0) for _ in range(before)] + [delta(1)]
    upstream = (
        start()
        + ev(block)
        + b"".join(deltas)
        + ev({"type": "content_block_stop", "index": 0})
        + end("end_turn")
    )
    got = run(request(), [upstream]).read()  # read() holds every delta to the open block
    assert got.message["content"] == [{"type": "text", "text": PIECE * (before + 1)}]


def test_text_after_a_lane_closed_inside_a_read_is_found_from_where_the_read_goes_on() -> None:
    # Upstream indexes from 1: the lane (client index 0) ends at upstream 1's stop, cut at a
    # delta at upstream index 0 (another block), more than 255 bytes into the second read.
    def block(index: int) -> bytes:
        content = {"type": "text", "text": ""}
        return ev({"type": "content_block_start", "index": index, "content_block": content})

    def text(index: int, words: str) -> bytes:
        body = {"type": "text_delta", "text": words}
        return ev({"type": "content_block_delta", "index": index, "delta": body})

    reads = [
        start() + block(1) + text(1, "hello "),
        text(1, "more")
        + ev({"type": "content_block_stop", "index": 1})
        + block(0)
        + text(0, "second ")
        + text(0, "block")
        + ev({"type": "content_block_stop", "index": 0})
        + end("end_turn"),
    ]
    got = run(request(), [b"".join(reads)], read_size=len(reads[0])).read()
    assert [b["text"] for b in got.message["content"]] == ["hello more", "second block"]
