"""SPEC §8: tool calls leaked into `output_text` become `function_call` items after their
message, under the same gate as Chat Completions (the tool was offered)."""

from __future__ import annotations

import orjson
import pytest

from proxy.core.rounds import RouteRules
from tests.responses.helpers import (
    KIMI_MARKUP,
    TOOLS,
    Upstream,
    calls_of,
    check_grammar,
    request,
    run,
)


def _pieces(text: str, size: int) -> list[str]:
    return [text[k : k + size] for k in range(0, len(text), size)]


@pytest.mark.parametrize("size", [3, 17, 1000])
def test_leaked_kimi_markup_in_a_stream_becomes_a_call(size: int) -> None:
    upstream = (
        Upstream().created().message(*_pieces("Let me look. " + KIMI_MARKUP, size)).completed()
    )
    result = run(request(), upstream.body())
    final = check_grammar(result.events)
    message, call = final["output"]
    assert message["content"][0]["text"] == "Let me look. "
    assert call["name"] == "bash" and orjson.loads(call["arguments"]) == {"command": "ls"}
    assert call["call_id"].startswith("call_")
    text = "".join(e["delta"] for e in result.events if e["type"] == "response.output_text.delta")
    assert text == "Let me look. "


def test_markup_naming_a_tool_not_offered_stays_text() -> None:
    upstream = Upstream().created().message(KIMI_MARKUP).completed()
    body = {**request(), "tools": [{**TOOLS[0], "name": "other"}]}
    final = check_grammar(run(body, upstream.body()).events)
    assert not calls_of(final) and final["output"][0]["content"][0]["text"] == KIMI_MARKUP


def test_recovery_off_leaves_the_markup() -> None:
    upstream = Upstream().created().message(KIMI_MARKUP).completed()
    final = check_grammar(
        run(request(), upstream.body(), rules=RouteRules(text_tool_calls=False)).events
    )
    assert not calls_of(final)


def test_leaked_markup_in_a_whole_body_becomes_a_call() -> None:
    body = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Ok. " + KIMI_MARKUP}],
            },
        ],
    }
    result = run({**request(), "stream": False}, orjson.dumps(body), stream=False)
    out = orjson.loads(result.body)["output"]
    assert out[0]["content"][0]["text"] == "Ok. "
    assert out[1]["type"] == "function_call" and out[1]["name"] == "bash"
