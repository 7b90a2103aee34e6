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
