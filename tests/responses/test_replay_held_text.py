"""A replay-only round's text, all of it, streamed as not streamed (SPEC §5 as §8 translates
it): what the text-call scanner held back in a message's `output_text` (a `<` that may open
markup, whitespace before anything else, a JSON value that may be a call) reaches the client,
and the follow-up request repeats it in the round's message item, as the non-streamed path
does."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.responses.helpers import Upstream, answered_call, check_grammar, event, request, run

OLD = '{"command":"ls"}'
RAW_ID = "functions.bash:0"  # the history's call as Kimi's dialect sends it upstream
LATER = "Done."

TEXTS = {
    "a `<` that may open markup": ["Let me check <"],
    "a `<` of its own": ["Let me check ", "<"],
    "whitespace first": ["\n", "\n Checking."],
    "a JSON value that is no call": ['{"note": ', '"a.py"}'],
}


def _history(stream: bool = True) -> dict[str, Any]:
    return request(*answered_call("call_0badf00d_functions.bash:0", OLD), model="kimi-k2") | {
        "stream": stream
    }


def _replay_round(pieces: list[str], shape: str) -> bytes:
    """`message done`: the message item complete, then the replay; `message left open`: its
    `.done` events never come; `body ends`: neither they nor `response.completed` come
    (SPEC §4: a body that ends cleanly is completed)."""
    upstream = Upstream().created().message(*pieces, done=shape == "message done")
    upstream.call(RAW_ID, OLD)
    if shape != "body ends":
        upstream.completed()
    return upstream.body()


def _later_round() -> bytes:
    return Upstream().created().message(LATER).completed().body()


def _message_texts(items: list[dict[str, Any]]) -> list[str]:
    return [
        part["text"]
        for item in items
        if item.get("type") == "message" and item.get("role") == "assistant"
        for part in item["content"]
        if part.get("type") == "output_text"
    ]


def _followup_texts(body: bytes) -> list[str]:
    """The round's message texts the follow-up request repeats (after the client's input)."""
    items = orjson.loads(body)["input"]
    return _message_texts(items[len(_history()["input"]) :])


def _unstreamed(pieces: list[str]) -> tuple[list[str], list[str]]:
    """The client's message texts and the follow-up's repeated ones, not streamed."""
    text = "".join(pieces)
    first: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "created_at": 5,
        "model": "m",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": RAW_ID,
                "name": "bash",
                "arguments": OLD,
            },
        ],
        "usage": {"input_tokens": 4, "output_tokens": 1, "total_tokens": 5},
    }
    later: dict[str, Any] = {
        **first,
        "id": "resp_2",
        "output": [{**first["output"][0], "id": "msg_2"}],
    }
    later["output"][0]["content"] = [{"type": "output_text", "text": LATER, "annotations": []}]
    result = run(_history(False), orjson.dumps(first), orjson.dumps(later), stream=False)
    [followup] = result.followups
    return _message_texts(orjson.loads(result.body)["output"]), _followup_texts(followup.body)


@pytest.mark.parametrize("split", [None, 9])
@pytest.mark.parametrize("shape", ["message done", "message left open", "body ends"])
@pytest.mark.parametrize("pieces", list(TEXTS.values()), ids=list(TEXTS))
def test_held_text_of_a_replay_round_reaches_the_client_and_the_follow_up(
    pieces: list[str], shape: str, split: int | None
) -> None:
    """`split`: the whole round in one read, or cut every 9 bytes."""
    text = "".join(pieces)
    result = run(_history(), _replay_round(pieces, shape), _later_round(), split=split)
    [followup] = result.followups
    final = check_grammar(result.events, exact=False)
    deltas = "".join(e["delta"] for e in result.events if e["type"] == "response.output_text.delta")
    shown = _message_texts(final["output"])
    repeated = _followup_texts(followup.body)
    assert (deltas, shown, repeated) == (text + LATER, [text, LATER], [text])
    assert _unstreamed(pieces) == (shown, repeated)


@pytest.mark.parametrize("item_done", [False, True])
def test_a_message_without_its_done_events_keeps_the_text_held_at_its_end(
    item_done: bool,
) -> None:
    """Any round, not only a replay's: a message item the upstream ends with its
    `output_item.done` alone (`item_done`), or never ends, still sends the `<` its scanner
    held, and its final item has it."""
    upstream = Upstream().created().message("Let me check <", done=False)
    if item_done:
        item = {
            "type": "message",
            "id": "msg_0",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Let me check <", "annotations": []}],
        }
        upstream.raw(event("response.output_item.done", output_index=0, item=item))
    result = run(_history(), upstream.completed().body())
    final = check_grammar(result.events, exact=False)
    deltas = "".join(e["delta"] for e in result.events if e["type"] == "response.output_text.delta")
    assert (deltas, _message_texts(final["output"])) == ("Let me check <", ["Let me check <"])
