"""SPEC §5: a replay-only round's follow-up request is the same whether the round was
streamed or not. The two paths build it apart (stream.py and items.py for a stream, body.py
for a whole response); a non-streamed follow-up once repeated a message's leaked call markup
beside the call item rebuilt from it, so the model saw the call twice. Here each round is
built as a stream, and the same items, as its `output_item.done` events describe them, are
the whole response's `output`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.responses.helpers import KIMI_MARKUP, Upstream, answered_call, event, parse, request, run

KIMI_ID = "functions.bash:0"
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}


def _reasoning(up: Upstream) -> Upstream:
    """A reasoning item, added and done (the builder has none of its own)."""
    at = up.index
    up.index += 1
    up.raw(event("response.output_item.added", output_index=at, item=REASONING))
    return up.raw(event("response.output_item.done", output_index=at, item=REASONING))


ROUNDS: dict[str, Callable[[Upstream], Upstream]] = {
    "a replayed call": lambda up: up.call(KIMI_ID),
    "text, then a replayed call": lambda up: up.message("Running it again.").call(KIMI_ID),
    "a replayed call leaked into text": lambda up: up.message("ok ", KIMI_MARKUP),
    "reasoning, then a replayed call": lambda up: _reasoning(up).call(KIMI_ID),
}


def _followup_input(upstream: bytes, *, stream: bool) -> list[Any]:
    body = request(*answered_call(KIMI_ID), model="kimi-k2", stream=stream)
    result = run(body, upstream, stream=stream)
    [followup] = result.followups
    return list(orjson.loads(followup.body)["input"])


@pytest.mark.parametrize("name", sorted(ROUNDS))
def test_a_replay_round_s_follow_up_is_the_same_streamed_or_not(name: str) -> None:
    streamed = ROUNDS[name](Upstream().created()).completed().body()
    items = [e["item"] for e in parse(streamed) if e["type"] == "response.output_item.done"]
    whole = orjson.dumps({"id": "resp_up", "object": "response", "output": items})
    sent = _followup_input(streamed, stream=True)
    assert _followup_input(whole, stream=False) == sent
    # The round's call goes upstream once, as a call item: never as markup in a text too.
    assert [i.get("type") for i in sent].count("function_call") == 2  # the old one and this
    assert all(KIMI_MARKUP not in orjson.dumps(i).decode() for i in sent)
