"""Property tests on the sans-IO core: whatever an upstream or a client sends, no exception
escapes StreamSanitizer.feed/end, sanitize_completion or translate_request, and what comes
out keeps SPEC §4's promises (see tests/reliability/invariants.py for the rules checked).

The same test functions drive the atheris harness (fuzz/fuzz_stream.py) through hypothesis'
`fuzz_one_input`, so a long coverage-guided run checks exactly these properties.
Set RELIABILITY_FUZZ_EXAMPLES=20000 for a deeper local run.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.chat.followup import build_followup
from proxy.chat.history import translate_request
from proxy.chat.message import sanitize_completion
from proxy.chat.stream import StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.errors import ReplayLoopDetected
from proxy.core.guard import GuardState
from tests.reliability.fuzzgen import (
    completion,
    encode_json,
    materialize,
    request_body,
    upstream_stream,
)
from tests.reliability.invariants import check_completion, check_stream, parse_sse_output

# Per test, not a global profile: loading one would change every other suite's settings.
# RELIABILITY_FUZZ_EXAMPLES=20000 for a deeper local run.
FUZZ = settings(
    max_examples=int(os.environ.get("RELIABILITY_FUZZ_EXAMPLES", "250")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

POLICIES = st.sampled_from(["auto", "always", "collisions", "off"])
DIALECTS = st.sampled_from(["auto", "passthrough", "kimi", "alnum9"])


def _hex_source() -> Any:
    counter = itertools.count()
    return lambda: f"{next(counter):08x}"


def _client_ids(body: dict[str, Any]) -> frozenset[str]:
    return translate_request(materialize(body), "passthrough").facts.client_ids


def _feed(core: StreamSanitizer, pieces: list[bytes]) -> bytes:
    out = []
    for piece in pieces:
        out += core.feed(piece)
    out += core.end()
    return b"".join(out)


@FUZZ
@given(
    body=request_body,
    rounds=st.lists(upstream_stream(), min_size=1, max_size=3),
    policy=POLICIES,
    dialect=DIALECTS,
    guard_on=st.booleans(),
    text_calls=st.booleans(),
    max_followups=st.integers(min_value=0, max_value=2),
)
def test_stream_core_survives_any_upstream_and_keeps_spec4(
    body: dict[str, Any],
    rounds: list[list[bytes]],
    policy: str,
    dialect: str,
    guard_on: bool,
    text_calls: bool,
    max_followups: int,
) -> None:
    translated = translate_request(materialize(body), dialect)
    guard = GuardState(enabled=guard_on, max_followups=max_followups)
    ids = ResponseIds(translated.facts, policy, guard, hex_source=_hex_source())
    core = StreamSanitizer(ids, text_tool_calls=text_calls)
    upstream_body, facts = translated.body, translated.facts
    sent: list[bytes] = []
    client = b""
    # A round whose only calls were replays hands over to a follow-up round (SPEC §5): the
    # client sees one stream across the rounds, so the invariants hold on the concatenation.
    for n, pieces in enumerate(rounds):
        sent += pieces
        client += _feed(core, pieces)
        if core.followup is None or n == len(rounds) - 1:
            break
        followup = core.followup
        try:
            upstream_body, facts = build_followup(
                upstream_body, facts, guard, followup.content, followup.replays
            )
        except ReplayLoopDetected:
            core.followup = None  # the shell sends the breaker's error event instead
            return
        orjson.dumps(upstream_body)  # the shell sends this body upstream
        ids = ResponseIds(facts, policy, guard, hex_source=_hex_source())
        core = StreamSanitizer(ids, carry=followup.carry, text_tool_calls=text_calls)
    check_stream(sent, client, core, policy=policy, history_client_ids=_client_ids(body))


@FUZZ
@given(pieces=st.lists(st.binary(max_size=64), max_size=12), policy=POLICIES)
def test_stream_core_survives_random_bytes(pieces: list[bytes], policy: str) -> None:
    body = {"model": "kimi-k2", "messages": [{"role": "user", "content": "hi"}]}
    translated = translate_request(body, "auto")
    core = StreamSanitizer(ResponseIds(translated.facts, policy, GuardState()))
    out = _feed(core, pieces)
    events = parse_sse_output(out)
    assert events[-1].data == b"[DONE]"


@FUZZ
@given(
    body=request_body,
    response=completion,
    policy=POLICIES,
    dialect=DIALECTS,
    guard_on=st.booleans(),
    text_calls=st.booleans(),
)
def test_completion_core_survives_any_upstream_and_keeps_spec4(
    body: dict[str, Any],
    response: dict[str, Any],
    policy: str,
    dialect: str,
    guard_on: bool,
    text_calls: bool,
) -> None:
    translated = translate_request(materialize(body), dialect)
    guard = GuardState(enabled=guard_on)
    ids = ResponseIds(translated.facts, policy, guard, hex_source=_hex_source())
    # What the shell does: parse the upstream's bytes, sanitize, serialize what changed.
    parsed = orjson.loads(encode_json(response))
    try:
        result = sanitize_completion(parsed, ids, text_tool_calls=text_calls)
    except ReplayLoopDetected:
        return  # SPEC §5: the shell answers 422
    check_completion(result.body, policy=policy, history_client_ids=_client_ids(body))


@FUZZ
@given(body=request_body, dialect=DIALECTS)
def test_history_translation_survives_any_history(body: dict[str, Any], dialect: str) -> None:
    raw = encode_json(body)
    parsed = orjson.loads(raw)
    first = translate_request(parsed, dialect)
    sent = first.to_bytes(raw)
    # SPEC §3: a pure function of the request, and what goes upstream is still JSON.
    again = translate_request(orjson.loads(raw), dialect)
    assert again.to_bytes(raw) == sent
    assert orjson.loads(sent)["messages"] is not None
