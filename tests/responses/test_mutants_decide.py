"""SPEC §2, §5, §8: what the mutation audit found unpinned in a call's fate
(proxy/responses/decide.py): the notes a dropped or a rewritten call leaves in the report."""

from __future__ import annotations

from proxy.core.notes import CallDropped, IdRewritten
from tests.responses.helpers import Upstream, calls_of, check_grammar, request, run
from tests.responses.test_replays import OLD, _history


def test_a_replay_is_noted_as_dropped_under_its_name_and_raw_id() -> None:
    replay = Upstream().created().call("functions.bash:0", OLD).completed().body()
    fresh = Upstream().created().message("x").completed().body()
    result = run(_history(), replay, fresh)
    assert result.exchange.report() == (
        [
            CallDropped(
                choice=0,
                name="bash",
                raw_id="functions.bash:0",
                reason="replay",
                matched="upstream id",
            )
        ],
        0,
    )


def test_an_in_response_duplicate_is_noted_as_dropped() -> None:
    body = Upstream().created().call("c1").call("c1", item_id="fc_2").completed().body()
    result = run(request(), body)
    assert len(calls_of(check_grammar(result.events))) == 1
    assert result.exchange.report() == (
        [
            CallDropped(
                choice=0, name="bash", raw_id="c1", reason="duplicate_in_response", matched=""
            )
        ],
        0,
    )


def test_calls_without_a_raw_id_are_noted_with_the_ids_the_client_got() -> None:
    body = Upstream().created().call("").call(None, item_id="fc_2").completed().body()
    result = run(request(), body)
    sent = [c["call_id"] for c in calls_of(check_grammar(result.events))]
    notes, count = result.exchange.report()
    assert count == 0
    assert notes == [
        IdRewritten(choice=0, index=n, name="bash", raw_id=None, client_id=cid, reason="absent")
        for n, cid in enumerate(sent)
    ]
    assert len(set(sent)) == 2


def test_a_raw_id_the_client_cannot_take_is_noted_with_it() -> None:
    body = Upstream().created().call("fc_1").completed().body()
    result = run(request(), body)
    [sent] = [c["call_id"] for c in calls_of(check_grammar(result.events))]
    assert result.exchange.report() == (
        [
            IdRewritten(
                choice=0,
                index=0,
                name="bash",
                raw_id="fc_1",
                client_id=sent,
                reason="counter_shaped",
            )
        ],
        0,
    )
    assert sent.endswith("_fc_1") and sent != "fc_1"
