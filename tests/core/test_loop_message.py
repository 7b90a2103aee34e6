"""A loop error that no supported client retries (SPEC §5, §8; docs/clients.md "Retry rules").

Each client decides whether to send a failed request again by a rule in its own shipped code:
some by the HTTP status (and `x-should-retry`) alone, some by searching the error's message, or
the whole body, for status-like digit runs and words. A loop message names a tool and ids the
model chose (`functions.bash:500`, a minted id's hex digits), and a retry re-runs the loop's
upstream rounds, so the message is written in its shown form (proxy/core/errors.py
`unretried`). Each rule below is copied from the installed package named beside it
(tests/agents/test_retry_rules.py checks the copies against the packages `make agents`
installs) and must not match the loop error on any surface, for any tool name and ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.anthropic.wire import error_body as anthropic_error_body
from proxy.core.errors import (
    SHOWN_SEPARATOR,
    RepeatLoopDetected,
    ReplayLoopDetected,
    openai_error_response,
    unretried,
)
from proxy.responses.exchange import loop_message as responses_loop_message

# --- the rules, as each client's code has them ------------------------------------------------

# pi 0.73.1: @mariozechner/pi-coding-agent/dist/core/agent-session.js:1931 (_isRetryableError,
# on the assistant message's errorMessage: the SDK's "<status> <message>").
PI = re.compile(
    r"overloaded|provider.?returned.?error|rate.?limit|too many requests|429|500|502|503|504"
    r"|service.?unavailable|server.?error|internal.?error|network.?error|connection.?error"
    r"|connection.?refused|connection.?lost|websocket.?closed|websocket.?error|other side closed"
    r"|fetch failed|upstream.?connect|reset before headers|socket hang up|ended without"
    r"|http2 request did not get a response|timed? out|timeout|terminated|retry delay",
    re.I,
)

# opencode 1.18.33: its bundled session/retry.ts (`SessionRetry.retryable`, in
# opencode-ai/bin/opencode.exe): an APIError is retried when its message or its response body
# matches one of these; another error when its message holds "exhausted", "unavailable" or
# "too_many_requests", or matches one of these.
OPENCODE = [
    re.compile(r"429|500|502|503|504|524", re.I),
    re.compile(
        r"rate increased too quickly|rate limit|rate-limit|rate_limit|too many requests", re.I
    ),
    re.compile(
        r"overloaded|service unavailable|service_unavailable|service-unavailable|internal error"
        r"|internal_error|internal server error|server error|server_error|server-error"
        r"|provider returned error|provider_returned_error|provider-returned-error",
        re.I,
    ),
    re.compile(
        r"terminated|fetch failed|failed to fetch|network[-_\s]error|upstream connect"
        r"|connection error|connection refused|connection lost|socket connection was closed"
        r"|socket hang up|reset before headers|getaddrinfo|enotfound|eai_again|econnrefused"
        r"|econnreset|etimedout",
        re.I,
    ),
    re.compile(
        r"^timeout$|\b(?:request|response|connection|network|stream|read) "
        r"(?:timeout|timed out|time out)\b",
        re.I,
    ),
    re.compile(
        r"try your request again|retry your request|resource exhausted|resource_exhausted", re.I
    ),
    re.compile(r"\btry again (?:later|in\b)|\b(?:currently|temporarily) at capacity\b", re.I),
]
OPENCODE_WORDS = ("exhausted", "unavailable", "too_many_requests")

# qwen-code 0.24.4: chunks/chunk-S34QJ6IR.js:145 (getErrorStatus reads a status from the
# message), chunks/chunk-H4VGADZA.js:175 (a status-less "too many requests ... try again" is a
# throttle) and :482 (network failures).
QWEN_STATUS = re.compile(r"HTTP_STATUS/(\d{3})\b")
QWEN_THROTTLE = (
    re.compile(r"^too many requests\b", re.I),
    re.compile(r"\b(?:wait|try(?:ing)? again)\b", re.I),
)
QWEN_NETWORK = re.compile(r"network error for request ", re.I)

# Claude Code 2.1.332 (claude.exe): overloaded and rate-limited by status or by these in the
# APIError's message ("<status> <body>").
CLAUDE = ('"type":"overloaded_error"', '"type":"rate_limit_error"')

# Codex 0.171.0 (codex-api/src/sse/responses.rs): a retry's delay is read from the message.
CODEX = re.compile(r"try again in\s*(\d+(?:\.\d+)?)\s*(s|ms|seconds?)", re.I)

# Cline 3.0.65: @cline/llms/dist/index.js:194 (P$): a status-less error is retried when a
# message matches this.
CLINE = re.compile(r"provider returned error", re.I)


def _opencode_matches(text: str) -> bool:
    lower = text.lower()
    return any(p.search(text) for p in OPENCODE) or any(w in lower for w in OPENCODE_WORDS)


def _qwen_matches(text: str) -> bool:
    status = QWEN_STATUS.search(text)
    throttle = all(p.search(text.strip()) for p in QWEN_THROTTLE)
    return bool(status or throttle or QWEN_NETWORK.search(text))


@dataclass(frozen=True)
class Client:
    name: str
    matches: Callable[[str], bool]  # does its rule retry an error carrying this text?


CLIENTS = [
    Client("pi", lambda text: bool(PI.search(text))),
    Client("opencode", _opencode_matches),
    Client("qwen-code", _qwen_matches),
    Client("claude-code", lambda text: any(c in text for c in CLAUDE)),
    Client("codex", lambda text: bool(CODEX.search(text))),
    Client("cline", lambda text: bool(CLINE.search(text))),
]

# The SDKs decide by status alone: openai (Python) _base_client.py `_should_retry`, anthropic
# (Python) _base_client.py `_should_retry`, openai (Node) client.js `shouldRetry`, the AI SDK's
# @ai-sdk/provider APICallError `isRetryable`: 408, 409, 429, >= 500 (and x-should-retry).
SDK_RETRIED = {408, 409, 429}


def _sdk_retries(status: int) -> bool:
    return status in SDK_RETRIED or status >= 500


# --- what a client receives of a loop ------------------------------------------------------------


def _texts(error: ReplayLoopDetected) -> list[str]:
    """Every form a loop error reaches a client in, as the text its rule reads: the message
    (after the status, as the SDKs write it), the bodies of the 422 / 400, the Chat
    Completions error event, Anthropic's error, Responses' `response.failed` message."""
    status, body = openai_error_response(error)
    anthropic = orjson.dumps(anthropic_error_body(error)).decode()
    return [
        error.message,
        f"{status} {error.message}",
        body.decode(),
        f"{status} {body.decode()}",
        error.sse_bytes().decode(),
        anthropic,
        f"{status} {anthropic}",
        responses_loop_message(error),
    ]


# Ids and names as models and clients write them, digit runs and retry words included.
_ID_PARTS = st.sampled_from(
    ["functions.", "bash", ":", "_", "-", "call_", "toolu_", "timeout", "rate_limit", "Overloaded"]
)
_IDS = st.lists(
    st.one_of(
        _ID_PARTS, st.from_regex(r"[0-9]{1,8}", fullmatch=True), st.text(min_size=1, max_size=4)
    ),
    min_size=1,
    max_size=8,
).map("".join)
_REASONS = st.sampled_from(
    [
        "the proxy already answered this replay once",
        "the same replay appeared twice in one response",
        "more than 2 follow-up rounds",
        "more than 500 follow-up rounds",
    ]
)


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
@settings(max_examples=300, deadline=None)
@given(tool=_IDS, raw_id=_IDS, client_id=st.none() | _IDS, reason=_REASONS)
def test_no_clients_rule_matches_a_replay_loop(
    client: Client, tool: str, raw_id: str, client_id: str | None, reason: str
) -> None:
    error = ReplayLoopDetected(tool, raw_id, reason, client_id=client_id)
    for text in _texts(error):
        assert not client.matches(text), (client.name, text)


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
@settings(max_examples=200, deadline=None)
@given(tool=_IDS, count=st.integers(min_value=4, max_value=100_000), reason=_REASONS)
def test_no_clients_rule_matches_a_repeat_loop(
    client: Client, tool: str, count: int, reason: str
) -> None:
    for text in _texts(RepeatLoopDetected(tool, count, reason)):
        assert not client.matches(text), (client.name, text)


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
@settings(max_examples=500, deadline=None)
@given(text=st.text(max_size=80) | _IDS)
def test_the_shown_form_of_any_text_matches_no_rule(client: Client, text: str) -> None:
    assert not client.matches(unretried(text)), (client.name, text)


@pytest.mark.parametrize(
    ("client", "text"),
    [
        ("pi", 'sending it as "functions.bash:500"'),
        ("opencode", '"call_12_0_a1502f3e"'),
        ("opencode", 'tool call "wait_unavailable"'),
        ("qwen-code", "HTTP_STATUS/503"),
        ("claude-code", '{"type":"overloaded_error"}'),
        ("codex", "try again in 5s"),
        ("cline", "provider returned error"),
    ],
)
def test_the_rules_are_live(client: str, text: str) -> None:
    """The copies above do match what the issue saw retried: the test above means something."""
    rule = next(c for c in CLIENTS if c.name == client)
    assert rule.matches(text)


def test_the_sdks_decide_by_status_and_the_loop_has_one_they_do_not_retry() -> None:
    replay = ReplayLoopDetected("bash", "functions.bash:500", "x", client_id="call_1_0_50050050")
    assert replay.status == 422 and not _sdk_retries(replay.status)
    assert not _sdk_retries(400)  # Responses' loop status (proxy/responses)


def test_the_shown_form_names_the_tool_and_both_ids_readably() -> None:
    error = ReplayLoopDetected(
        "bash",
        "functions.bash:500",
        "the proxy already answered this replay once",
        client_id="call_3_0_a5003f12",
    )
    assert error.message == (
        'Tool-call replay loop detected: the model replayed tool call "bash" (id '
        '"call_3_0_a50·03f12" in the conversation) after it was already answered, sending it '
        'as "functions.bash:5·00" (the proxy already answered this replay once). The response '
        "was stopped so the call is not executed again."
    )
    assert SHOWN_SEPARATOR == "\u00b7"
    # ids with no three digits in a row and no retry word are named as they are
    plain = ReplayLoopDetected("Bash", "functions.Bash:0", "r", client_id="toolu_1_0_ab12cd34")
    assert '"functions.Bash:0"' in plain.message and '"toolu_1_0_ab12cd34"' in plain.message


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("12", "12"),
        ("123", "1·23"),
        ("1234", "12·34"),
        ("12345", "1·23·45"),
        ("check_timeout", "check_t·imeout"),
        ("Rate-Limit 429", "R·ate-Limit 4·29"),
        ("service unavailable", "service u·navailable"),
        # JSON writes a control character as `\u00XX`: its digits and the next ones made `500`
        ("\x1500", "\ufffd00"),
    ],
)
def test_the_shown_form(text: str, shown: str) -> None:
    assert unretried(text) == shown


def test_the_error_bodies_are_json_with_the_shown_message() -> None:
    error = ReplayLoopDetected("bash", "functions.bash:500", "r")
    assert json.loads(openai_error_response(error)[1])["error"]["message"] == error.message
