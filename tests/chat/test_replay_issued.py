"""SPEC §2.2 and §5: a replay under the id the upstream first issued, recognized without state.

Upstreams whose counter restarts every response (Moonshot's hosted Kimi API, relays) replay a
call as `functions.bash:0` while the translated history said `functions.bash:3`. The client id
the proxy minted for the call carries four hex digits of the raw id's digest, so the next
request can tell, from the history alone, that `functions.bash:0` is the id the call was first
issued under.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.chat.followup import build_followup
from proxy.chat.history import FORM_ISSUED, FORM_UPSTREAM, translate_request
from proxy.chat.message import sanitize_completion
from proxy.chat.stream import StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.errors import ReplayLoopDetected, unretried
from proxy.core.ids import mint_client_id
from proxy.core.notes import CallDropped, explain
from tests.chat.helpers import (
    USER,
    Setup,
    assistant,
    call_summary,
    calls,
    content_of,
    feed_reads,
    finish,
    frag,
    hcall,
    header,
    parse_sse,
    request,
    role,
    run,
    sse,
    text,
    tool_deltas,
    tool_msg,
)

RESTARTED = "functions.bash:0"  # what a restarted counter calls every response's first call
ARGS_A = '{"command":"ls"}'
ARGS_B = '{"command":"echo hi >> log"}'
ARGS_B_REFORMATTED = '{ "command": "echo hi >> log" }'
# The proxy minted both in earlier turns, from the same raw id, one turn apart.
CLIENT_A = mint_client_id(1, 0, "a1a1", RESTARTED)
CLIENT_B = mint_client_id(2, 0, "b2b2", RESTARTED)


def kimi_history(**kw: Any) -> dict[str, Any]:
    """Two answered calls; the Kimi dialect sends them upstream as `:0` and `:1`."""
    return request(
        [
            USER,
            assistant(hcall(CLIENT_A, "bash", ARGS_A)),
            tool_msg(CLIENT_A),
            assistant(hcall(CLIENT_B, "bash", ARGS_B)),
            tool_msg(CLIENT_B),
        ],
        model="kimi-k2",
        **kw,
    )


def replay_of_b(
    raw_id: str = RESTARTED, arguments: str = ARGS_B_REFORMATTED, name: str = "bash"
) -> bytes:
    return sse(
        role(),
        calls(header(0, raw_id, name)),
        calls(frag(0, arguments[:7])),
        calls(frag(0, arguments[7:])),
        finish("tool_calls"),
    )


def followup_core() -> StreamSanitizer:
    """The core of the follow-up round after a round that only replayed B (SPEC §5)."""
    setup = Setup(body=kimi_history())
    tr = setup.translated()
    ids = setup.ids()
    first = StreamSanitizer(ids)
    assert feed_reads(first, [replay_of_b()]) == b""  # nothing reached the client
    assert first.followup is not None and first.nothing_released
    _, facts = build_followup(
        tr.body, tr.facts, ids.guard, first.followup.content, first.followup.replays
    )
    return StreamSanitizer(ResponseIds(facts, "auto", ids.guard), carry=first.followup.carry)


def test_the_translated_history_gives_the_replay_another_id() -> None:
    translated = translate_request(kimi_history(), "auto")
    ids = [m["tool_calls"][0]["id"] for m in translated.body["messages"] if m.get("tool_calls")]
    assert ids == ["functions.bash:0", "functions.bash:1"]  # B went upstream as `:1`


def test_a_replay_under_the_restarted_id_is_recognized_and_answered() -> None:
    setup = Setup(body=kimi_history())
    result = run(setup.core, replay_of_b())
    assert tool_deltas(result.events) == []  # the client never sees it
    followup = result.core.followup
    assert followup is not None
    (replay,) = followup.replays
    assert (replay.raw_id, replay.name) == (RESTARTED, "bash")
    assert (replay.client_id, replay.form) == (CLIENT_B, FORM_ISSUED)


def test_the_same_restarted_id_with_the_other_calls_arguments_matches_that_call() -> None:
    # `functions.bash:0` is also A's upstream id in this request: both forms lead to A.
    setup = Setup(body=kimi_history())
    followup = run(setup.core, replay_of_b(arguments=ARGS_A)).core.followup
    assert followup is not None
    assert followup.replays[0].client_id == CLIENT_A
    assert followup.replays[0].form == FORM_UPSTREAM


def test_the_restarted_id_with_new_arguments_is_a_fresh_call() -> None:
    setup = Setup(body=kimi_history())
    result = run(setup.core, replay_of_b(arguments='{"command":"pwd"}'))
    assert result.core.followup is None
    ((client_id, name, arguments),) = call_summary(result.events)
    assert (name, arguments) == ("bash", '{"command":"pwd"}')
    assert client_id not in (CLIENT_A, CLIENT_B, RESTARTED)


def test_a_possible_issued_id_replay_is_held_until_its_arguments_are_complete() -> None:
    core = Setup(body=kimi_history()).core()
    out = feed_reads(
        core, [sse(role(), calls(header(0, RESTARTED, "bash")), done=False)], end=False
    )
    assert tool_deltas(parse_sse(out)) == []  # no header yet: it may be a replay
    out = feed_reads(core, [sse(calls(frag(0, '{"command":"pwd"}')), done=False)], end=False)
    (released,) = tool_deltas(parse_sse(out))
    assert released["id"] and released["function"]["arguments"] == '{"command":"pwd"}'


def test_an_unrelated_raw_id_is_not_held() -> None:
    core = Setup(body=kimi_history()).core()
    out = feed_reads(
        core, [sse(calls(header(0, "functions.grep:7", "grep")), done=False)], end=False
    )
    assert len(tool_deltas(parse_sse(out))) == 1  # SPEC §4: nothing is held that need not be


def test_a_kept_client_id_is_the_issued_id() -> None:
    # A native id the proxy kept: Kimi's dialect sends it upstream as `functions.read:0`, and
    # the upstream replays it as it first issued it.
    native = "toolu_01Abc"
    body = request(
        [USER, assistant(hcall(native, "read", ARGS_A)), tool_msg(native)], model="kimi-k2"
    )
    followup = run(Setup(body=body).core, replay_of_b(native, ARGS_A, "read")).core.followup
    assert followup is not None
    assert (followup.replays[0].client_id, followup.replays[0].form) == (native, FORM_ISSUED)


def test_an_unanswered_call_is_never_replayed() -> None:
    body = request([USER, assistant(hcall(CLIENT_B, "bash", ARGS_B))], model="kimi-k2")
    result = run(Setup(body=body).core, replay_of_b())
    assert result.core.followup is None
    assert len(call_summary(result.events)) == 1


def test_non_streaming_recognizes_the_issued_id() -> None:
    setup = Setup(body=kimi_history())
    completion = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": RESTARTED,
                            "type": "function",
                            "function": {"name": "bash", "arguments": ARGS_B_REFORMATTED},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    result = sanitize_completion(completion, setup.ids())
    assert [r.client_id for r in result.replays] == [CLIENT_B]
    (note,) = [n for n in result.notes if isinstance(n, CallDropped)]
    assert note.matched == FORM_ISSUED
    assert "matched the issued id" in explain(note)


def test_n_greater_than_one_drops_an_issued_id_replay_without_followup() -> None:
    setup = Setup(body=kimi_history(n=2), hex_values=("aaaa", "bbbb"))
    data = sse(
        calls(header(0, RESTARTED, "bash", ARGS_B), choice=0),
        text("no calls", choice=1),
        finish("tool_calls", choice=0),
        finish("stop", choice=1),
    )
    result = run(setup.core, data)
    assert result.core.followup is None and result.core.error is None
    assert call_summary(result.events, 0) == []


def test_the_breaker_names_the_client_id_and_the_raw_id() -> None:
    second = followup_core()
    feed_reads(second, [replay_of_b()])
    error = second.error
    assert isinstance(error, ReplayLoopDetected)
    assert error.message.startswith("Tool-call replay loop detected")
    # the id the client knows and the one the model sent, in their shown form (SPEC §5)
    assert unretried(f'"{CLIENT_B}"') in error.message
    assert unretried(f'"{RESTARTED}"') in error.message
    assert '"bash"' in error.message
    assert "functions.bash:1" not in error.message  # never an id the client did not see


@pytest.mark.parametrize("raw_id", ["functions.bash:1", RESTARTED])
def test_a_replay_of_a_synthetically_answered_call_trips_under_either_id(raw_id: str) -> None:
    second = followup_core()
    feed_reads(second, [replay_of_b(raw_id)])
    assert isinstance(second.error, ReplayLoopDetected)


def test_a_replay_of_another_call_under_the_same_restarted_id_is_not_a_loop() -> None:
    """Restarted counters give every response's first call the same raw id: after the proxy
    answered B's replay, a replay of A comes back as `functions.bash:0` too. It is a replay of
    a call the proxy has not answered in this request (SPEC §5), so it gets its own answer."""
    second = followup_core()
    feed_reads(second, [replay_of_b(arguments=ARGS_A)])
    assert second.error is None
    assert second.followup is not None
    (replay,) = second.followup.replays
    assert (replay.raw_id, replay.client_id) == (RESTARTED, CLIENT_A)


# -- SPEC §5: until a byte reaches the client, a loop can still be an HTTP 422 ----------------


def test_a_first_chunk_with_only_the_role_waits_for_the_next_event() -> None:
    core = Setup().core()
    assert feed_reads(core, [sse(role(), done=False)], end=False) == b""
    assert core.nothing_released
    out = parse_sse(feed_reads(core, [sse(text("hi"), done=False)], end=False))
    assert [e.data["choices"][0]["delta"] for e in out] == [
        {"role": "assistant", "content": ""},
        {"content": "hi"},
    ]
    assert not core.nothing_released


def test_content_never_waits() -> None:
    core = Setup().core()
    out = parse_sse(feed_reads(core, [sse(text("hi"), done=False)], end=False))
    assert len(out) == 1 and not core.nothing_released


def test_a_round_of_only_replays_releases_nothing_and_its_role_leads_the_next_round() -> None:
    second = followup_core()
    events = parse_sse(feed_reads(second, [sse(role(), text("Done."), finish("stop"))]))
    deltas = [e.data["choices"][0]["delta"] for e in events if e.is_chunk and e.data["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}  # round 1's, once
    assert all("role" not in d for d in deltas[1:])
    assert content_of(events) == "Done."


def test_a_loop_before_any_byte_leaves_only_the_error() -> None:
    second = followup_core()
    out = second.feed(replay_of_b())
    assert second.error is not None and second.nothing_released
    assert out == [second.error.sse_bytes()]  # the shell answers it as a 422 instead


def test_a_loop_after_content_ends_the_stream_with_the_error_event() -> None:
    core = Setup(body=kimi_history()).core()
    data = sse(
        role(),
        text("Running it again."),
        calls(header(0, RESTARTED, "bash", ARGS_B)),
        calls(header(1, RESTARTED, "bash", ARGS_B)),  # the same replay twice: a loop
        finish("tool_calls"),
    )
    events = parse_sse(feed_reads(core, [data]))
    assert core.error is not None and not core.nothing_released
    assert events[0].data["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-1].is_error
