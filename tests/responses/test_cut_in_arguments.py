"""A body that ends cleanly inside a function call's arguments (no `.done` events, no
`response.completed`).

SPEC §8 (canonical streams, Responses): a body that ends cleanly without `response.completed`
is completed; an error event is for a broken transport or a stall (§6). Nothing looks at
whether the arguments are whole: the call reaches the client with the arguments that arrived,
in its `.done` events and in `response.completed`. These tests hold the stream to that.
"""

from __future__ import annotations

from tests.responses.helpers import Upstream, answered_call, request, run

CUT = '{"command": "l'  # the body ends here, inside a JSON string


def test_a_body_cut_clean_inside_arguments_is_completed_with_them() -> None:
    upstream = Upstream().created().call("call_new", CUT, done=False, item_done=False)
    result = run(request(*answered_call("call_old")), upstream.body())
    events = result.events
    types = [e["type"] for e in events]
    assert "error" not in types and "response.failed" not in types
    assert types[-1] == "response.completed"
    deltas = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    [done] = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert deltas == done["arguments"] == CUT
    final = events[-1]["response"]
    assert final["status"] == "completed"
    [call] = [i for i in final["output"] if i["type"] == "function_call"]
    assert call["arguments"] == CUT
