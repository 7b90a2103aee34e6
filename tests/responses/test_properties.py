"""Properties of the Responses stream core over generated upstream streams: whatever mix of
quirks, ids and read boundaries, the client gets the canonical grammar (SPEC §8), its call ids
are unique, and each rewritten id decodes to the raw id the upstream issued."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.responses.ids import decode_call_id
from tests.responses.helpers import Upstream, calls_of, check_grammar, request, run

RAW_IDS = st.sampled_from(
    [None, "", "functions.bash:0", "functions.bash:1", "bash_0", "call_abcDEF123", "0", "x" * 60]
)
CALL = st.fixed_dictionaries(
    {
        "call_id": RAW_IDS,
        "arguments": st.sampled_from(['{"command":"ls"}', '{"a":[1,2,{"b":"ü"}]}', "{}", ""]),
        "item_id": st.sampled_from([None, "", "fc_1", "fc_2"]),
        "whole": st.booleans(),
        "deltas": st.booleans(),
        "flush": st.booleans(),
        "done": st.booleans(),
        "item_done": st.booleans(),
    }
)
ITEM = st.one_of(CALL, st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3))


@settings(max_examples=150, deadline=None)
@given(items=st.lists(ITEM, min_size=1, max_size=4), split=st.integers(1, 300), ends=st.booleans())
def test_any_upstream_stream_becomes_the_canonical_grammar(
    items: list[Any], split: int, ends: bool
) -> None:
    upstream = Upstream().created()
    for item in items:
        if isinstance(item, dict):
            upstream.call(**item)
        else:
            upstream.message(*item)
    if ends:
        upstream.completed()
    final = check_grammar(run(request(), upstream.body(), split=split).events)
    ids = [call["call_id"] for call in calls_of(final)]
    assert len(ids) == len(set(ids))
    for call_id in ids:
        raw = decode_call_id(call_id)
        issued = {item["call_id"] for item in items if isinstance(item, dict)}
        assert raw is None or raw in issued
        assert len(call_id) <= 64
