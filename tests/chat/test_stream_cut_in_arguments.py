"""A body that ends cleanly inside a call's arguments (no `finish_reason`, no `[DONE]`).

SPEC §4, "How a stream ends": a body that ends cleanly without `finish_reason` or `[DONE]` is
completed by the proxy (`tool_calls` if the choice delivered calls, else `stop`, then
`[DONE]`); only a broken transport (a reset, a chunked body cut short: the upstream layer's to
tell) or a stall ends the client's stream with an error event (§6). Nothing in §4 looks at
whether the last call's arguments are complete, and the stop signal is changed only where it
contradicts what was delivered: the call reaches the client with the arguments it has, as a
whole message with such arguments would. These tests hold the stream to that.
"""

from __future__ import annotations

from tests.chat.helpers import (
    USER,
    Setup,
    assistant,
    call_summary,
    calls,
    finish_reasons,
    frag,
    hcall,
    header,
    request,
    role,
    run,
    sse,
    tool_msg,
)

CUT = '{"path": "a.'  # the body ends here, inside a JSON string


def _cut_round(raw_id: str) -> bytes:
    return sse(
        role(),
        calls(header(0, raw_id, "read_file")),
        calls(frag(0, CUT[:5])),
        calls(frag(0, CUT[5:])),
        done=False,
    )


def test_a_body_cut_clean_inside_arguments_is_completed_with_them() -> None:
    result = run(Setup().core, _cut_round("call_1"), every=False)
    events = result.events
    assert [(name, arguments) for _, name, arguments in call_summary(events)] == [
        ("read_file", CUT)
    ]
    assert finish_reasons(events) == ["tool_calls"]
    assert events[-1].is_done and not any(e.is_error for e in events)
    assert result.core.followup is None and result.core.error is None


def test_a_held_call_cut_clean_is_decided_on_what_arrived() -> None:
    """Under an answered call's id the call is held until its arguments are complete or its
    choice finishes (SPEC §4): the end finishes it, and arguments that differ from the
    answered call's make it a fresh call (SPEC §5), delivered as it is."""
    history = request(
        [USER, assistant(hcall("call_1", "read_file", '{"path": "a.py"}')), tool_msg("call_1")]
    )
    result = run(Setup(body=history).core, _cut_round("call_1"), every=False)
    events = result.events
    [(client_id, name, arguments)] = call_summary(events)
    assert (name, arguments) == ("read_file", CUT) and client_id != "call_1"
    assert finish_reasons(events) == ["tool_calls"]
    assert events[-1].is_done and not any(e.is_error for e in events)
