"""SPEC §9 end to end through the bridge's exchange (sans-IO): Kimi-style ids that recur
every turn, a replay answered by a follow-up round, the breaker, whole messages, upstream
errors in Anthropic's shape and the proxy's own token count."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.bridge.anthropic_chat import count_tokens_estimate, upstream_error
from proxy.bridge.anthropic_chat.reasoning import sign_reasoning
from proxy.core.ids import mint_client_id
from tests.bridge.anthropic_chat.bridge_wire import (
    BASH_TOOL,
    call_args,
    call_header,
    chat_stream,
    chunk,
    claude_code_request,
    completion,
    new_exchange,
    parse_events,
    play,
)

JSON = dict[str, Any]
LS = {"command": "ls"}
PWD = {"command": "pwd"}
HEX4 = "abab"  # the random half of a minted id under the tests' fixed entropy


def request(messages: list[JSON], *, stream: bool = True) -> JSON:
    body: JSON = {"model": "kimi-k2", "max_tokens": 512, "messages": messages}
    body["tools"] = [BASH_TOOL]
    if stream:
        body["stream"] = True
    return body


def kimi_call(arguments: JSON, *, text: str = "") -> bytes:
    """Kimi (vLLM or Moonshot's API) numbering its call `functions.Bash:0` again."""
    head = [chunk({"role": "assistant", "content": ""})]
    if text:
        head.append(chunk({"content": text}))
    return chat_stream(
        *head,
        call_header(0, "functions.Bash:0", "Bash"),
        call_args(0, json.dumps(arguments)),
        chunk({}, "tool_calls"),
        usage={"prompt_tokens": 50, "completion_tokens": 10},
    )


def tool_uses(client: bytes) -> list[JSON]:
    return [
        e["content_block"]
        for e in parse_events(client)
        if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    ]


def turn(tool_id: str, arguments: JSON, output: str) -> list[JSON]:
    use = {"type": "tool_use", "id": tool_id, "name": "Bash", "input": arguments}
    answer = {"type": "tool_result", "tool_use_id": tool_id, "content": output}
    return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [answer]}]


FIRST = [{"role": "user", "content": "look around"}]


def test_kimi_ids_recurring_every_turn() -> None:
    """The client gets a unique toolu_ id per turn although the upstream says
    `functions.Bash:0` every time; each next request goes upstream in Kimi's numbering."""
    first = play(new_exchange(request(FIRST)), [kimi_call(LS)]).client
    (use1,) = tool_uses(first)
    assert use1["id"] == mint_client_id(1, 0, HEX4, "functions.Bash:0", "toolu_")

    history2 = FIRST + turn(use1["id"], LS, "a.txt")
    exchange2 = new_exchange(request(history2))
    upstream2 = json.loads(exchange2.upstream_request)
    assert exchange2.facts.dialect == "kimi"
    assert upstream2["messages"][1]["tool_calls"][0]["id"] == "functions.Bash:0"
    assert upstream2["messages"][2] == {
        "role": "tool",
        "tool_call_id": "functions.Bash:0",
        "content": "a.txt",
    }
    (use2,) = tool_uses(play(exchange2, [kimi_call(PWD)]).client)
    assert use2["id"] == mint_client_id(2, 0, HEX4, "functions.Bash:0", "toolu_")
    assert use2["id"] != use1["id"]

    history3 = history2 + turn(use2["id"], PWD, "/work")
    upstream3 = json.loads(new_exchange(request(history3)).upstream_request)
    ids = [m["tool_calls"][0]["id"] for m in upstream3["messages"] if m.get("tool_calls")]
    answers = [m["tool_call_id"] for m in upstream3["messages"] if m["role"] == "tool"]
    assert ids == answers == ["functions.Bash:0", "functions.Bash:1"]


def test_claude_code_history_goes_upstream_in_kimi_numbering() -> None:
    exchange = new_exchange(claude_code_request("03-tool-error"))
    upstream = json.loads(exchange.upstream_request)
    ids = [c["id"] for m in upstream["messages"] for c in m.get("tool_calls", [])]
    answers = [m["tool_call_id"] for m in upstream["messages"] if m["role"] == "tool"]
    assert ids == ["functions.Bash:0", "functions.Read:1", "functions.Write:2", "functions.Read:3"]
    assert answers == ids
    assert "thinking" in exchange.dropped and "cache_control" in exchange.dropped


def test_a_replay_is_answered_by_a_followup_round() -> None:
    """Turn 2's upstream replays turn 1's call (same id, same arguments): the client never
    sees it; the follow-up goes upstream in Chat's API and its answer continues the message."""
    first_id = mint_client_id(1, 0, HEX4, "functions.Bash:0", "toolu_")
    exchange = new_exchange(request(FIRST + turn(first_id, LS, "a.txt")))
    done = chat_stream(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "There is a.txt."}),
        chunk({}, "stop"),
        usage={"prompt_tokens": 80, "completion_tokens": 5},
    )
    played = play(exchange, [kimi_call(LS, text="Checking."), done])
    (followup,) = played.followups
    tool = followup["messages"][-1]
    assert tool["role"] == "tool"
    assert tool["content"].startswith(
        'Duplicate tool call id "functions.Bash:0" was already handled'
    )
    assert followup["messages"][-2]["role"] == "assistant"
    assert followup["messages"][-2]["content"] == "Checking."
    events = parse_events(played.client)
    assert [e["type"] for e in events].count("message_start") == 1
    texts = [e["delta"]["text"] for e in events if e.get("delta", {}).get("type") == "text_delta"]
    assert "".join(texts) == "Checking.There is a.txt."
    assert tool_uses(played.client) == []
    assert events[-2]["delta"]["stop_reason"] == "end_turn"
    assert events[-2]["usage"]["input_tokens"] == 130  # summed over both rounds (SPEC §5)
    assert events[-2]["usage"]["output_tokens"] == 15


def test_the_breaker_ends_the_stream_with_anthropics_error_after_a_block() -> None:
    first_id = mint_client_id(1, 0, HEX4, "functions.Bash:0", "toolu_")
    exchange = new_exchange(request(FIRST + turn(first_id, LS, "a.txt")))
    played = play(exchange, [kimi_call(LS), kimi_call(LS)])
    assert played.loop is not None
    events = parse_events(played.client)
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "error",
    ]
    assert events[1]["content_block"] == {"type": "text", "text": ""}
    assert events[-1]["error"]["type"] == "loop_detected"
    assert first_id in events[-1]["error"]["message"]


def test_reasoning_round_trips_to_the_next_request() -> None:
    thinking = {"type": "thinking", "thinking": "", "signature": sign_reasoning("plan: ls")}
    use = {"type": "tool_use", "id": "toolu_1_0_abab1234", "name": "Bash", "input": LS}
    answer = {"type": "tool_result", "tool_use_id": "toolu_1_0_abab1234", "content": "a.txt"}
    history = [
        *FIRST,
        {"role": "assistant", "content": [thinking, use]},
        {"role": "user", "content": [answer]},
    ]
    upstream = json.loads(new_exchange(request(history)).upstream_request)
    assert upstream["messages"][1]["reasoning_content"] == "plan: ls"
    assert upstream["messages"][1]["tool_calls"][0]["id"] == "functions.Bash:0"


# -- whole messages -----------------------------------------------------------------------------


def test_a_whole_message() -> None:
    message = {
        "role": "assistant",
        "content": "Listing.",
        "reasoning_content": "they want files",
        "tool_calls": [
            {
                "id": "functions.Bash:0",
                "type": "function",
                "function": {"name": "Bash", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    usage = {
        "prompt_tokens": 40,
        "completion_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 8},
    }
    played = play(
        new_exchange(request(FIRST, stream=False)),
        [completion(message, "tool_calls", usage)],
        stream=False,
    )
    body = json.loads(played.client)
    assert body == {
        "id": "msg_" + "ab" * 12,
        "type": "message",
        "role": "assistant",
        "model": "kimi-k2",
        "content": [
            {
                "type": "thinking",
                "thinking": "they want files",
                "signature": sign_reasoning("they want files"),
            },
            {"type": "text", "text": "Listing."},
            {
                "type": "tool_use",
                "id": mint_client_id(1, 0, HEX4, "functions.Bash:0", "toolu_"),
                "name": "Bash",
                "input": LS,
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 32,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 8,
            "output_tokens": 9,
        },
    }


def test_a_whole_message_replay_and_its_followup() -> None:
    first_id = mint_client_id(1, 0, HEX4, "functions.Bash:0", "toolu_")
    replay = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "functions.Bash:0",
                "type": "function",
                "function": {"name": "Bash", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    usage = {"prompt_tokens": 10, "completion_tokens": 2}
    played = play(
        new_exchange(request(FIRST + turn(first_id, LS, "a.txt"), stream=False)),
        [
            completion(replay, "tool_calls", usage),
            completion({"role": "assistant", "content": "Done."}, "stop", usage),
        ],
        stream=False,
    )
    assert len(played.followups) == 1
    body = json.loads(played.client)
    assert body["content"] == [{"type": "text", "text": "Done."}]
    assert body["stop_reason"] == "end_turn"
    assert body["usage"]["input_tokens"] == 20 and body["usage"]["output_tokens"] == 4


@pytest.mark.parametrize("answer", [b"<html>bad gateway</html>", b'{"choices": []}'])
def test_a_whole_answer_that_is_no_message_is_an_upstream_failure(answer: bytes) -> None:
    played = play(new_exchange(request(FIRST, stream=False)), [answer], stream=False)
    assert played.broken is not None
    assert played.client == b""


# -- errors and counts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_upstream_error_types(status: int, kind: str) -> None:
    body = b'{"error": {"message": "upstream says no", "type": "x", "code": null}}'
    assert json.loads(upstream_error(status, body)) == {
        "type": "error",
        "error": {"type": kind, "message": "upstream says no"},
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"object": "error", "message": "max_tokens is too large", "code": 400}',
            "max_tokens is too large",
        ),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b'{"error": "model not loaded"}', "model not loaded"),
        (b"upstream connect error", "upstream connect error"),
        (b"", "the upstream answered HTTP 502"),
    ],
)
def test_upstream_error_keeps_the_message(body: bytes, message: str) -> None:
    assert json.loads(upstream_error(502, body))["error"]["message"] == message


def test_count_tokens_estimate() -> None:
    small = request(FIRST)
    big = claude_code_request("03-tool-error")
    counted = {key: big[key] for key in ("system", "messages", "tools")}
    size = len(json.dumps(counted, ensure_ascii=False, separators=(",", ":")).encode())
    assert count_tokens_estimate(big) == {"input_tokens": size // 4}
    assert (
        0
        < count_tokens_estimate(small)["input_tokens"]
        < count_tokens_estimate(big)["input_tokens"]
    )
