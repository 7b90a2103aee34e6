"""Request direction of both bridges, fuzzed (SPEC §9): whatever body a Responses or Anthropic
client sends, the bridge either refuses it with a 400 that says why (`ClientRequestError`) or
sends the upstream a valid Chat Completions body; nothing else escapes. Fields the bridge has
no word for change nothing but the names in `dropped`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.anthropic.codec import ANTHROPIC_CODEC
from proxy.bridge.anthropic_chat import new_anthropic_over_chat
from proxy.bridge.anthropic_chat.ids import chat_tool_id
from proxy.bridge.anthropic_chat.reasoning import sign_reasoning
from proxy.bridge.names import safe_name
from proxy.bridge.responses_chat.exchange import new_responses_over_chat
from proxy.bridge.responses_chat.reasoning import seal
from proxy.core.errors import ClientRequestError
from proxy.core.rounds import RouteRules
from proxy.core.surface_codec import SurfaceCodec
from proxy.responses.codec import RESPONSES_CODEC
from tests.bridge.fuzz.fuzz_bodies import (
    ANTHROPIC_FIELDS,
    RESPONSES_FIELDS,
    anthropic_bodies,
    garbage,
    ids,
    responses_bodies,
    text,
)
from tests.bridge.fuzz.fuzz_grammar import check_chat_request
from tests.bridge.fuzz.fuzz_settings import SETTINGS

JSON = dict[str, Any]
Factory = Callable[..., Any]
MAX_MESSAGE = 400  # a refusal says what is wrong; it does not echo the client's values whole
RULES = [RouteRules(), RouteRules(dialect="kimi"), RouteRules(dialect="alnum9")]
BRIDGES: list[tuple[SurfaceCodec, Factory]] = [
    (RESPONSES_CODEC, new_responses_over_chat),
    (ANTHROPIC_CODEC, new_anthropic_over_chat),
]


def entropy(n: int) -> bytes:
    return b"\x5a" * n


def encode(body: object) -> bytes:
    """The client's bytes (json: integers past 64 bits are JSON too; orjson reads them as
    floats)."""
    return json.dumps(body, ensure_ascii=False).encode()


def serve(codec: SurfaceCodec, factory: Factory, body: JSON, rules: RouteRules) -> Any:
    """What the shell does with a client body: its surface's body rule, then the bridge's
    factory. Returns the exchange, or None for a 400 with a message."""
    raw = encode(body)
    try:
        parsed = codec.parse_body(raw)
        return factory(parsed, raw, rules, entropy)
    except ClientRequestError as exc:
        assert exc.status == 400 and exc.message.strip(), f"a refusal without a message: {exc!r}"
        assert len(exc.message) <= MAX_MESSAGE, f"a refusal's message is no summary: {exc!r}"
        return None


def assert_served_or_refused(codec: SurfaceCodec, factory: Factory, body: JSON) -> None:
    for rules in RULES:
        exchange = serve(codec, factory, body, rules)
        if exchange is None:
            continue
        chat = check_chat_request(exchange.upstream_request)
        assert all(isinstance(name, str) and name for name in exchange.dropped), exchange.dropped
        assert isinstance(chat.get("messages"), list)


@SETTINGS
@given(responses_bodies())
def test_responses_bodies_are_served_or_refused(body: JSON) -> None:
    assert_served_or_refused(RESPONSES_CODEC, new_responses_over_chat, body)


@SETTINGS
@given(anthropic_bodies())
def test_anthropic_bodies_are_served_or_refused(body: JSON) -> None:
    assert_served_or_refused(ANTHROPIC_CODEC, new_anthropic_over_chat, body)


@SETTINGS
@given(garbage)
def test_any_json_value_is_served_or_refused(body: object) -> None:
    """Not even an object: the surface's body rule or the bridge refuses it."""
    for codec, factory in BRIDGES:
        raw = encode(body)
        try:
            parsed = codec.parse_body(raw)
            exchange = factory(parsed, raw, RouteRules(), entropy)
        except ClientRequestError:
            continue
        check_chat_request(exchange.upstream_request)


# -- differential: unknown fields change nothing but `dropped` --------------------------------

extra_fields = st.dictionaries(
    text.filter(lambda k: k not in RESPONSES_FIELDS and k not in ANTHROPIC_FIELDS),
    garbage.filter(lambda v: v is not None),
    min_size=1,
    max_size=3,
)


def _both(codec: SurfaceCodec, factory: Factory, body: JSON, extra: JSON) -> None:
    plain = serve(codec, factory, body, RouteRules())
    widened = serve(codec, factory, {**body, **extra}, RouteRules())
    assert (plain is None) == (widened is None), "an unknown field changed whether it is served"
    if plain is None:
        return
    assert widened.upstream_request == plain.upstream_request
    added = {name for name in widened.dropped if name not in plain.dropped}
    named = {safe_name(k) for k in extra if k not in body} - set(plain.dropped)
    assert added == named, (added, extra)


@SETTINGS
@given(responses_bodies(), extra_fields)
def test_responses_unknown_fields_are_dropped_and_named(body: JSON, extra: JSON) -> None:
    body.pop("unknown_field", None)
    _both(RESPONSES_CODEC, new_responses_over_chat, body, extra)


@SETTINGS
@given(anthropic_bodies(), extra_fields)
def test_anthropic_unknown_fields_are_dropped_and_named(body: JSON, extra: JSON) -> None:
    body.pop("unknown_field", None)
    _both(ANTHROPIC_CODEC, new_anthropic_over_chat, body, extra)


@SETTINGS
@given(anthropic_bodies())
def test_anthropic_cache_control_changes_nothing_but_dropped(body: JSON) -> None:
    """SPEC §9: `cache_control` has no Chat word: the same Chat body, and it is named."""
    plain = serve(ANTHROPIC_CODEC, new_anthropic_over_chat, body, RouteRules())
    marked = _with_cache_control(body)
    widened = serve(ANTHROPIC_CODEC, new_anthropic_over_chat, marked, RouteRules())
    assert (plain is None) == (widened is None)
    if plain is not None and marked != body:
        assert widened.upstream_request == plain.upstream_request
        assert "cache_control" in widened.dropped


def _with_cache_control(body: JSON) -> JSON:
    """Every block of every message and of the system prompt marked for caching."""
    mark = {"type": "ephemeral"}

    def blocks(content: object) -> object:
        if isinstance(content, list):
            return [{**b, "cache_control": mark} if isinstance(b, dict) else b for b in content]
        return content

    out = dict(body)
    if isinstance(out.get("system"), list):
        out["system"] = blocks(out["system"])
    if isinstance(out.get("messages"), list):
        out["messages"] = [
            {**m, "content": blocks(m.get("content"))} if isinstance(m, dict) else m
            for m in out["messages"]
        ]
    return out


@SETTINGS
@given(responses_bodies(), st.binary(min_size=1, max_size=8))
def test_responses_upstream_request_needs_no_randomness(body: JSON, seed: bytes) -> None:
    """SPEC §3: the upstream request is a pure function of the client's body."""
    first = serve(RESPONSES_CODEC, new_responses_over_chat, body, RouteRules(dialect="kimi"))
    if first is None:
        return
    other = new_responses_over_chat(
        first_body(body), b"", RouteRules(dialect="kimi"), lambda n: (seed * n)[:n]
    )
    assert other.upstream_request == first.upstream_request


def first_body(body: JSON) -> JSON:
    return dict(orjson.loads(encode(body)))


# -- reasoning and ids travel without state (SPEC §9) ------------------------------------------

signatures = st.sampled_from(["own", "cut", "foreign", "missing"])


def _signature(kind: str, sealed: str) -> str | None:
    return {"own": sealed, "cut": sealed[:-2], "foreign": "EqQBCkYIBxgC", "missing": None}[kind]


@SETTINGS
@given(text.filter(bool), text, signatures, ids.filter(lambda i: isinstance(i, str) and i != ""))
def test_anthropic_thinking_and_ids_round_trip(
    thought: str, shown_text: str, kind: str, tool_id: str
) -> None:
    """The proxy's own signature brings back exactly the text it sealed; a damaged one the
    block's own text; a foreign or missing one nothing, and it is named. The tool_use id
    goes upstream as its Chat form (`toolu_X` -> `call_X`), answered by its result."""
    thinking = {"type": "thinking", "thinking": shown_text}
    signature = _signature(kind, sign_reasoning(thought))
    if signature is not None:
        thinking["signature"] = signature
    use = {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": "ls"}}
    body = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [thinking, use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id}]},
        ]
    }
    exchange = new_anthropic_over_chat(body, b"", RouteRules(dialect="passthrough"), entropy)
    chat = check_chat_request(exchange.upstream_request)
    assistant, result = chat["messages"][1], chat["messages"][2]
    expected = {"own": thought, "cut": None, "foreign": None, "missing": None}[kind]
    if kind == "cut":
        assert assistant.get("reasoning_content") in (shown_text, *_prefixes(thought))
    else:
        assert assistant.get("reasoning_content") == expected
        assert ("thinking_block" in exchange.dropped) == (expected is None)
    assert assistant["tool_calls"][0]["id"] == chat_tool_id(tool_id) == result["tool_call_id"]


def _prefixes(text_: str) -> list[str]:
    raw = text_.encode()
    return [raw[:n].decode(errors="ignore") for n in range(len(raw) + 1)]


@SETTINGS
@given(text.filter(bool), signatures, ids.filter(lambda i: isinstance(i, str) and i != ""))
def test_responses_reasoning_and_call_ids_round_trip(thought: str, kind: str, call_id: str) -> None:
    """The proxy's own `encrypted_content` brings back exactly its text as the turn's
    `reasoning_content`; any other is dropped and named. The call_id goes upstream as is."""
    reasoning: JSON = {"type": "reasoning", "summary": []}
    sealed = _signature(kind, seal(thought))
    if sealed is not None:
        reasoning["encrypted_content"] = sealed
    call = {"type": "function_call", "call_id": call_id, "name": "shell", "arguments": "{}"}
    body = {
        "input": [
            {"type": "message", "role": "user", "content": "go"},
            reasoning,
            call,
            {"type": "function_call_output", "call_id": call_id, "output": "ok"},
        ]
    }
    exchange = new_responses_over_chat(body, b"", RouteRules(dialect="passthrough"), entropy)
    chat = check_chat_request(exchange.upstream_request)
    assistant, result = chat["messages"][1], chat["messages"][2]
    if kind == "own":
        assert assistant["reasoning_content"] == thought
        assert "reasoning_items" not in exchange.dropped
    elif kind != "cut":
        assert "reasoning_content" not in assistant and "reasoning_items" in exchange.dropped
    else:
        assert assistant.get("reasoning_content") in (None, *_prefixes(thought))
    assert assistant["tool_calls"][0]["id"] == call_id == result["tool_call_id"]
