"""A replay-only round's text, all of it, streamed as not streamed (SPEC §5 as §8 translates
it): what the text-call scanner held back (a `<` that may open markup, whitespace before
anything else, a JSON value that may be a call) reaches the client when its text block
closes, and the follow-up's assistant message repeats it, as the non-streamed path does."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.events import Forward
from proxy.core.ids import mint_client_id
from tests.anthropic.anthropic_wire import (
    assistant,
    end,
    request,
    results,
    run,
    run_message,
    start,
    text,
    tool,
    tool_use,
    whole_message,
)

LS = {"command": "ls"}
MINTED = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
HISTORY = (assistant(tool_use(MINTED, "Bash", LS)), results(MINTED))
REPLAY_ID = "functions.Bash:0"  # the upstream id the history was translated to (kimi-k2)
LATER = "Done."

TEXTS = {
    "a `<` that may open markup": ["Let me check <"],
    "a `<` of its own": ["Let me check ", "<"],
    "whitespace first": ["\n", "\n Checking."],
    "a JSON value that is no call": ['{"note": ', '"a.py"}'],
}


def _replay_round(pieces: list[str], shape: str) -> bytes:
    """`text first`: the text block, stopped, then the replay; `text left open`: the tool's
    start closes the text block; `text last`: after the replay, open when `message_delta`
    comes; `text last, body ends`: after the replay, and the body ends there (SPEC §4)."""
    replay = tool(0, REPLAY_ID, "Bash", LS)
    if shape == "text first":
        return start("msg_a") + text(0, *pieces) + tool(1, REPLAY_ID, "Bash", LS) + end()
    if shape == "text left open":
        body = text(0, *pieces, stop=False) + tool(1, REPLAY_ID, "Bash", LS)
        return start("msg_a") + body + end()
    if shape == "text last":
        return start("msg_a") + replay + text(1, *pieces, stop=False) + end()
    return start("msg_a") + replay + text(1, *pieces, stop=False)


def _message(msg_id: str, *content: dict[str, Any], reason: str) -> dict[str, Any]:
    return whole_message(*content, msg_id=msg_id, reason=reason)


def _texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"] for b in blocks if b["type"] == "text"]


def _unstreamed(pieces: list[str], shape: str) -> tuple[list[str], list[str]]:
    """The client's text blocks and the follow-up's repeated ones, not streamed."""
    block: dict[str, Any] = {"type": "text", "text": "".join(pieces)}
    call: dict[str, Any] = {"type": "tool_use", "id": REPLAY_ID, "name": "Bash", "input": LS}
    content = [call, block] if shape.startswith("text last") else [block, call]
    replay = _message("msg_a", *content, reason="tool_use")
    final = _message("msg_b", {"type": "text", "text": LATER}, reason="end_turn")
    event, followups = run_message(request(*HISTORY, stream=False), [replay, final])
    assert isinstance(event, Forward)
    [followup] = followups
    repeated = followup["messages"][-2]["content"]
    return _texts(orjson.loads(event.data)["content"]), _texts(repeated)


@pytest.mark.parametrize("read_size", [None, 7])
@pytest.mark.parametrize(
    "shape", ["text first", "text left open", "text last", "text last, body ends"]
)
@pytest.mark.parametrize("pieces", list(TEXTS.values()), ids=list(TEXTS))
def test_held_text_of_a_replay_round_reaches_the_client_and_the_follow_up(
    pieces: list[str], shape: str, read_size: int | None
) -> None:
    """`read_size`: the whole round in one read, or cut every 7 bytes."""
    later = start("msg_b") + text(0, LATER) + end("end_turn")
    got = run(request(*HISTORY), [_replay_round(pieces, shape), later], read_size=read_size)
    [followup] = got.followups
    repeated = _texts(followup["messages"][-2]["content"])
    received = got.read()
    shown = _texts(received.message["content"])
    assert (shown, repeated) == (["".join(pieces), LATER], ["".join(pieces)])
    assert received.message["stop_reason"] == "end_turn"
    assert _unstreamed(pieces, shape) == (shown, repeated)
