"""The doctor against every tool profile of the simulated provider, over real sockets.

Each profile's quirks are named, and nothing else: the reference profile (OpenAI's shape)
reports nothing. Every decision the proxy's own core takes on the same responses is
explained by one of the named quirks, so the doctor misses nothing the proxy repairs.
"""

from __future__ import annotations

import pytest

from proxy.doctor.diagnose import diagnose
from proxy.doctor.quirks import QUIRKS
from proxy.simulator.profiles import LEAK_FORMATS, PROFILES
from tests.servers import ServerThread

COUNTER = {"counter_ids", "recurring_ids"}
EXPECTED: dict[str, set[str]] = {
    "reference": set(),
    "kimi": {"kimi_ids", "recurring_ids"},
    # A conversation-wide counter: ids differ turn to turn, and start again in a new
    # conversation (the doctor holds two).
    "kimi-vllm": {"kimi_ids", "recurring_ids"},
    # Kimi on Chat Completions alone, thinking (its other APIs answer 404): ids that restart
    # every response, and, sent back as they came (`:0` twice), history ids it does not
    # recognise, so it leaks its markup on the next turn, as Kimi does.
    "kimi-chat-only": {"kimi_ids", "recurring_ids", "leaked_markup"},
    # Responses quirks; on Chat Completions these profiles are the Kimi-like default.
    "no-item-ids": {"kimi_ids", "recurring_ids"},
    "no-done-events": {"kimi_ids", "recurring_ids"},
    "name-index": COUNTER,
    "call-index": COUNTER,
    "repeat-fields": COUNTER | {"repeated_fields"},
    "no-index": COUNTER | {"missing_index", "stop_after_calls"},
    "empty-id": {"empty_ids"},
    "missing-type": {"missing_index", "missing_type"},
    "missing-id": {"missing_ids", "object_arguments"},
    "index0-parallel": COUNTER | {"repeated_fields", "parallel_one_index"},
    "id-every-delta": {"changing_ids"},
    "null-id": COUNTER | {"null_string_ids"},
    "int-id": COUNTER | {"integer_ids"},
    "final-flush": {"final_flush"},
    "no-finish": {"no_finish_reason", "no_done"},
    "no-block-stop": set(),  # an Anthropic Messages quirk: chat completions as the reference
    "replay-once": COUNTER | {"replay"},
    "replay-loop": COUNTER | {"replay"},
    "replay-loop-chatty": COUNTER | {"replay"},
    # The same call again under a fresh id (SPEC §10's repeat): the doctor's replay probe
    # names it as a re-issued call ("again, under another id").
    "repeat-forever": {"replay"},
    "poll-until-done": {"replay"},
    "replay-mixed": COUNTER | {"replay"},
    "replay-once-restarted": COUNTER | {"replay"},
    "replay-loop-restarted": COUNTER | {"replay"},
    "dup-in-response": COUNTER | {"duplicate_ids"},
    **{f"leak-{fmt}": {"leaked_markup"} for fmt in LEAK_FORMATS},
    "fault-garbage": {"keep_alives", "non_json_data"},
    # A truncated line inside every streamed call. The doctor also reports the third streamed
    # turn's call as the second's again ("again, under another id"), which no other profile
    # with the same plan shows: a side effect of the broken lines on its probe, left named.
    "fault-garbage-in-call": {"non_json_data", "replay"},
    "fault-crlf": {"crlf_framing"},
    # One byte per write, UTF-8 split inside characters: framing only, nothing to report.
    "fault-drip": set(),
}
# Profiles that answer no tool conversation: text only, or an error (tests/doctor/test_cli.py).
NOT_TOOL_PROFILES = {
    name
    for name, profile in PROFILES.items()
    if profile.text_only
    or name in ("fault-429", "fault-500", "fault-reset", "fault-stall", "fault-hang")
}

# What explains each decision of the proxy's core (its notes), by quirk code.
EXPLAINED_BY: dict[str, set[str]] = {
    "ids rewritten: counter_shaped": {"counter_ids"},
    "ids rewritten: invalid": {"kimi_ids", "invalid_ids", "leaked_markup"},  # Kimi markup ids
    "ids rewritten: absent": {"missing_ids", "empty_ids", "leaked_markup"},
    "ids rewritten: colliding": {"recurring_ids", "duplicate_ids"},
    "stream repairs: repeated_fields": {"repeated_fields"},
    "stream repairs: missing_index": {"missing_index"},
    "stream repairs: missing_type": {"missing_type"},
    "stream repairs: parallel_calls_one_index": {"parallel_one_index"},
    "stream repairs: id_changed": {"changing_ids"},
    "stream repairs: object_arguments": {"object_arguments"},
    "stream repairs: arguments_flush": {"final_flush"},
    "stream repairs: text_tool_call": {"leaked_markup"},
    "stream repairs: non_json_data": {"non_json_data"},
    "stream repairs: finish_reason": {
        "stop_after_calls",
        "tool_calls_without_calls",
        "no_finish_reason",
        "leaked_markup",  # the recovered calls make `stop` untrue
        "replay",  # a round whose only call was a replay claims tool_calls it no longer has
    },
    "calls withheld: replay": {"replay"},
    "calls withheld: duplicate_in_response": {"duplicate_ids"},
    "replays answered: replay": {"replay"},
}


def test_every_tool_profile_has_an_expectation() -> None:
    assert set(PROFILES) - NOT_TOOL_PROFILES == set(EXPECTED)


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_each_profile_is_named_and_nothing_else(provider: ServerThread, profile: str) -> None:
    diagnosis = diagnose(provider.url + "/v1", profile, None, timeout=60)
    assert diagnosis.responses == 6, [e.error for e in diagnosis.chat.exchanges]
    assert {f.quirk.code for f in diagnosis.findings} == EXPECTED[profile]
    for finding in diagnosis.findings:
        assert finding.quirk is QUIRKS[finding.quirk.code]
        assert finding.where and finding.examples
    named = {f.quirk.code for f in diagnosis.findings}
    for kind, counts in diagnosis.account.items():
        for label in counts:
            assert EXPLAINED_BY[f"{kind}: {label}"] & named, (kind, label, named)


def test_the_reference_profile_reports_nothing_and_the_proxy_would_change_nothing(
    provider: ServerThread,
) -> None:
    diagnosis = diagnose(provider.url + "/v1", "reference", None, timeout=60)
    assert diagnosis.findings == [] and diagnosis.account == {}
    values = [s.value for s in diagnosis.settings]
    assert values == ["passthrough", "auto", "on", "auto", "same", "auto"]
    # SPEC §11: a loopback host and the model name "reference" name no provider family
    assert diagnosis.settings[-1].why.startswith("auto detects no family: provider family generic")


def test_what_the_model_did_not_do_is_said_rather_than_reported_clean(
    provider: ServerThread,
) -> None:
    url = provider.url + "/v1"
    text_only = diagnose(url, "reference+rounds=0", None, timeout=60)
    assert text_only.findings == []
    assert text_only.coverage_notes == [
        "the model made no tool call at all: the tool-call checks had nothing to judge"
    ]
    one_at_a_time = diagnose(url, "reference", None, timeout=60)
    assert one_at_a_time.coverage_notes == [
        "the model never made parallel calls: the checks for them had nothing to judge"
    ]
    # Two rounds of calls, then the simulated model answers in text in turn 3.
    two_rounds = diagnose(url, "name-index+rounds=2", None, timeout=60)
    assert two_rounds.coverage_notes == [
        "the model answered without tool calls in streaming turn 3; non-streaming turn 3"
    ]


# How each profile without a tool conversation shows (`+` options keep the test short).
WITHOUT_CONVERSATION = {
    "fault-429": ("", "HTTP 429: Rate limit reached for requests (simulated)"),
    "fault-500": ("", "HTTP 500: The server had an error (simulated)"),
    "fault-reset": ("", "the request failed: RemoteProtocolError"),
    "fault-stall": ("+stall_s=60", "no answer within the time limit"),
    "fault-hang": ("+stall_s=60", "no answer within the time limit"),
}


@pytest.mark.parametrize("profile", sorted(NOT_TOOL_PROFILES))
def test_profiles_without_a_tool_conversation_are_said_so(
    provider: ServerThread, profile: str
) -> None:
    if PROFILES[profile].text_only:
        diagnosis = diagnose(provider.url + "/v1", profile + "+chunks=4", None, timeout=60)
        assert diagnosis.responses == 6 and diagnosis.findings == []
        assert diagnosis.coverage_notes[0].startswith("the model made no tool call at all")
        return
    options, error = WITHOUT_CONVERSATION[profile]
    # The stalling profiles hold on for 60 s: the run's own limit ends it.
    timeout = 1.5 if options else 60
    diagnosis = diagnose(provider.url + "/v1", profile + options, None, timeout=timeout)
    assert diagnosis.responses == 0 and not diagnosis.chat.answers
    assert diagnosis.chat.detail.startswith(error), diagnosis.chat.detail
