"""SPEC §8: blocks that arrive whole inside `message_start` (`whole.py`) at the edges the
mutation audit found unpinned: they are the follow-up's record of the round like streamed
blocks, and a block that is not an object, or a tool_use, does not end the blocks after it."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.ids import mint_client_id
from tests.anthropic.anthropic_wire import (
    assistant,
    ev,
    parse,
    request,
    results,
    run,
    tool_use,
)
from tests.anthropic.test_anthropic_whole_message import _whole

LS = {"command": "ls"}
GREP = {"pattern": "x"}
PWD = {"command": "pwd"}
STOP = ev({"type": "message_stop"})
BASH_ID = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
GREP_ID = mint_client_id(1, 1, "abcd", "functions.grep:1", "toolu_")
# Two calls already executed: each is a replay when it comes again under its raw id.
HISTORY = (
    assistant(tool_use(BASH_ID, "Bash", LS), tool_use(GREP_ID, "grep", GREP)),
    results(BASH_ID, GREP_ID),
)


def whole(*blocks: Any, stop_reason: str | None = "tool_use") -> bytes:
    return ev(_whole(*blocks, stop_reason=stop_reason)) + STOP


def said(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def called(raw_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": raw_id, "name": name, "input": args}


def test_whole_blocks_of_each_replayed_round_are_its_follow_ups_assistant_turn() -> None:
    rounds = [
        whole(said("First."), called("functions.Bash:0", "Bash", LS)),  # kept in place
        whole(said("Second."), called("functions.grep:1", "grep", GREP)),  # as events
        whole(said("Done."), stop_reason="end_turn"),
    ]
    got = run(request(*HISTORY), rounds)
    turns = [followup["messages"][-2] for followup in got.followups]
    assert [turn["content"][0] for turn in turns] == [said("First."), said("Second.")]
    received = got.read()
    assert received.message["content"] == [said("First."), said("Second."), said("Done.")]


def test_a_first_whole_block_that_is_not_an_object_is_kept_and_the_rest_follow() -> None:
    got = run(request(), [whole("junk", said("After."), stop_reason="end_turn")])
    [(name, first), *_] = parse(got.client)
    assert name == "message_start" and isinstance(first, dict)
    assert first["message"]["content"] == ["junk", said("After.")]
    assert got.client.endswith(ev({"type": "message_stop"}))


def test_a_continuation_round_sends_every_whole_block_after_junk_and_a_tool_use() -> None:
    rounds = [
        whole(called("functions.Bash:0", "Bash", LS)),
        whole("junk", called("functions.Bash:5", "Bash", PWD), said("Done.")),
    ]
    got = run(request(*HISTORY), rounds)
    starts = [data for _, data in parse(got.client) if isinstance(data, dict)]
    blocks = [e["content_block"] for e in starts if e["type"] == "content_block_start"]
    assert [(b["type"], b.get("name"), b.get("text")) for b in blocks] == [
        ("tool_use", "Bash", None),
        ("text", None, "Done."),
    ]
    deltas = [e for e in starts if e["type"] == "content_block_delta"]
    assert orjson.loads("".join(d["delta"]["partial_json"] for d in deltas)) == PWD
