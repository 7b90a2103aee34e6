"""What the Responses client tests share (SPEC §8): the simulator profiles they run and the
checks on a `Loop` whose ids are Responses `call_id`s.

A `call_id` the proxy rewrites is `call_{hex8}_{raw id}` (so it decodes back to the id the
upstream issued), which keeps the raw id's characters (`functions.run_shell_command:0`): the
Chat Completions rule (`[A-Za-z0-9_-]{1,40}`) does not apply, OpenAI's 64-character limit does.
"""

from __future__ import annotations

from tests.clients.common import FINAL_TEXT, LOOP_ERROR, Loop, expected_calls

# Simulator profile -> how many tool calls its 3 rounds make.
RESPONSES_PROFILES: dict[str, int] = {
    "kimi": 3,  # call_id functions.<name>:0 restarting every response
    "name-index": 6,  # <name>_0 / <name>_1 parallel calls, reused every response
    "no-index": 3,  # call_0 every response, the whole arguments in output_item.added
    "empty-id": 3,  # "" call_ids
    "missing-id": 3,  # no call_id at all, the whole arguments in output_item.added
    "no-item-ids": 3,  # Kimi call_ids and function_call items without an `id`
    "no-done-events": 3,  # Kimi call_ids and no `.done` events (arguments, item)
    "final-flush": 3,  # the complete arguments once more after the fragments
    "no-finish": 3,  # no response.completed
    "replay-once": 3,  # round 2 replays round 1's call with its call_id, once
    "kimi-k2/replay-once": 3,  # the same behind the Kimi dialect
}
REPLAY_LOOP = "replay-loop"
MAX_CALL_ID = 64  # OpenAI answers `string_above_max_length` beyond


def assert_responses_loop_completes(loop: Loop, profile: str) -> None:
    context = f"{profile}: {loop}"
    assert loop.error is None, context
    assert loop.final_text == FINAL_TEXT, context
    expected = expected_calls(profile, RESPONSES_PROFILES)
    assert sorted(call.key for call in loop.executed) == sorted(expected), context
    ids = loop.ids
    assert all(isinstance(i, str) and 0 < len(i) <= MAX_CALL_ID for i in ids), context
    assert len(set(ids)) == len(ids), f"call_ids collide: {context}"


def assert_responses_loop_reported(loop: Loop) -> None:
    """The first round runs once; then the client reports the proxy's loop error, an HTTP 400
    (SPEC §8: the status Codex and the SDKs do not retry), for streams too: the looping
    model sends nothing before its replay, so no byte has gone out when the breaker trips."""
    context = str(loop)
    assert loop.error is not None and LOOP_ERROR in loop.error, context
    assert loop.status == 400, context
    assert loop.code == "tool_call_replay_loop", context
    first_call = expected_calls("replay-once", RESPONSES_PROFILES)[0]
    assert [call.key for call in loop.executed] == [first_call], context
    assert loop.final_text is None, context
