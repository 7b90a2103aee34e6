"""SPEC §8: what the mutation audit found unpinned in a message's text under the markup
scanner (proxy/responses/textcalls.py, when the request offered tools): a delta that brings
the client no text is not sent."""

from __future__ import annotations

import pytest

from proxy.core.notes import DeltaRepaired
from proxy.responses.ids import decode_call_id
from tests.responses.helpers import KIMI_MARKUP, Upstream, check_grammar, event, request, run


def _delta(n: int, value: object) -> bytes:
    ref = {"item_id": "msg_0", "output_index": 0, "content_index": 0}
    return event("response.output_text.delta", **ref, delta=value, sequence_number=n)


@pytest.mark.parametrize("value", [None, 7, ["x"], "", "<"])
def test_a_delta_that_brings_no_text_yet_is_not_sent(value: object) -> None:
    """Not a string, empty, or all of it held by the scanner (`<` may open markup): the
    client gets no delta for it; the text it held goes out later, and the message's text is
    what the client got."""
    upstream = Upstream().created().message(done=False)
    body = b"".join(upstream.events) + _delta(5, "Hi ") + _delta(6, value) + _delta(7, "there")
    done = Upstream().message("Hi there", done=True).events[-3:]  # the parts' and item's ends
    tail = Upstream(index=1).completed().body()
    result = run(request(), body + b"".join(done) + tail)
    final = check_grammar(result.events)
    deltas = [e["delta"] for e in result.events if e["type"] == "response.output_text.delta"]
    held = value if value == "<" else ""
    assert all(isinstance(d, str) and d for d in deltas)
    assert "".join(deltas) == f"Hi {held}there"
    assert final["output"][0]["content"][0]["text"] == f"Hi {held}there"


def test_the_part_s_done_events_carry_the_text_the_client_got() -> None:
    """Markup recovered as a call, and a `<` the scanner still holds when the part's
    `output_text.done` comes: the held text goes out first as a delta of that part, then the
    `.done` events and the done item name the client's text, not the upstream's."""
    pieces = ["Let me look. ", KIMI_MARKUP, " Then <"]
    upstream = Upstream().created().message(*pieces).completed()
    result = run(request(), upstream.body())
    final = check_grammar(result.events)
    text = "Let me look.  Then <"
    mine = [e for e in result.events if e.get("output_index") == 0]
    kinds = [e["type"] for e in mine]
    at = kinds.index("response.output_text.done")
    held = mine[at - 1]
    assert held == {
        "type": "response.output_text.delta",
        "item_id": "msg_0",
        "output_index": 0,
        "content_index": 0,
        "delta": "<",
        "logprobs": [],
        "sequence_number": held["sequence_number"],
    }
    assert "".join(e["delta"] for e in mine if e["type"] == "response.output_text.delta") == text
    assert mine[at]["text"] == text
    part_done = mine[kinds.index("response.content_part.done")]
    assert part_done["part"] == {"type": "output_text", "text": text, "annotations": []}
    assert final["output"][0]["content"][0]["text"] == text
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]


def _part_end(kind: str, n: int, **fields: object) -> bytes:
    ref = {"item_id": "msg_0", "output_index": 0, "content_index": 0}
    return event(kind, **ref, **fields, sequence_number=n)


def test_a_part_whose_text_came_only_in_its_done_event_keeps_it() -> None:
    """No deltas, the text in `output_text.done` and `content_part.done` only: nothing was
    scanned, the events pass with the upstream's text and no delta is made up."""
    part = {"type": "output_text", "text": "whole", "annotations": []}
    body = b"".join(Upstream().created().message(done=False).events)
    body += _part_end("response.output_text.done", 5, text="whole")
    body += _part_end("response.content_part.done", 6, part=part)
    body += Upstream().message("whole").events[-1]  # the item's done event
    result = run(request(), body + Upstream(index=1).completed().body())
    kinds = result.types()
    assert "response.output_text.delta" not in kinds
    done = result.events[kinds.index("response.output_text.done")]
    assert done["text"] == "whole"
    assert result.events[kinds.index("response.content_part.done")]["part"] == part


@pytest.mark.parametrize("part", [{"type": "refusal", "refusal": "no"}, None, "text"])
def test_a_part_done_that_is_not_output_text_passes_unchanged(part: object) -> None:
    """The part had text deltas, but its `content_part.done` names another kind of part (or
    none): it is passed on as it came."""
    body = b"".join(Upstream().created().message("Hi", done=False).events)
    body += _part_end("response.content_part.done", 7, part=part)
    result = run(request(), body + Upstream(index=1).completed().body())
    kinds = result.types()
    assert result.events[kinds.index("response.content_part.done")]["part"] == part


def test_a_call_the_scanner_completes_at_the_part_s_end_is_delivered() -> None:
    """Markup whose call the scanner can only close when the part's text ends (no section
    end): the call is recovered at `output_text.done` and delivered after the message."""
    open_call = KIMI_MARKUP.removesuffix("<|tool_calls_section_end|>")
    upstream = Upstream().created().message("Look. ", open_call).completed()
    final = check_grammar(run(request(), upstream.body()).events)
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["arguments"] == '{"command":"ls"}'


def test_a_later_message_s_items_carry_its_own_text() -> None:
    """The second message (output index 1) leaked markup: its done item and the completed
    output carry the text the client got, without the markup."""
    upstream = Upstream().created().message("First.").message("Look. ", KIMI_MARKUP).completed()
    final = check_grammar(run(request(), upstream.body()).events)
    assert [item["type"] for item in final["output"]] == ["message", "message", "function_call"]
    assert final["output"][1]["content"][0]["text"] == "Look. "


@pytest.mark.parametrize("content", [None, "text", 5])
def test_a_done_message_whose_content_is_not_a_list_is_passed_as_it_came(content: object) -> None:
    body = b"".join(Upstream().created().message("Hi", done=False).events)
    item = {"type": "message", "id": "msg_0", "role": "assistant", "content": content}
    body += event("response.output_item.done", output_index=0, item=item, sequence_number=9)
    result = run(request(), body + Upstream(index=1).completed().body())
    done = next(e for e in result.events if e["type"] == "response.output_item.done")
    assert done["item"]["content"] == content


def test_a_call_in_a_message_never_added_is_recovered_when_it_ends() -> None:
    """A second message's deltas with no `output_item.added` (and no `.done` for its part),
    its markup closed only by the text's end: the message's done event ends its scanner and
    the call is delivered after it."""
    open_call = KIMI_MARKUP.removesuffix("<|tool_calls_section_end|>")
    ref = {"item_id": "msg_1", "output_index": 1, "content_index": 0}
    deltas = b"".join(
        event("response.output_text.delta", **ref, delta=text, sequence_number=20 + n)
        for n, text in enumerate(["Look. ", open_call])
    )
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    done = event("response.output_item.done", output_index=1, item=item, sequence_number=30)
    body = Upstream().created().message("First.").body() + deltas + done
    result = run(request(), body + Upstream(index=2).completed().body())
    final = result.events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["message", "message", "function_call"]
    assert final["output"][2]["arguments"] == '{"command":"ls"}'


def test_a_later_message_ended_by_its_done_item_alone_sends_what_its_scanner_held() -> None:
    """The second message (output index 1), added, its part never `.done`: its done event
    ends the scanner, whose held text goes out as its delta and whose call is delivered."""
    open_call = KIMI_MARKUP.removesuffix("<|tool_calls_section_end|>")
    upstream = Upstream().created().message("First.").message("Look. <", done=False)
    ref = {"item_id": "msg_1", "output_index": 1, "content_index": 0}
    more = event("response.output_text.delta", **ref, delta=" " + open_call, sequence_number=9)
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    done = event("response.output_item.done", output_index=1, item=item, sequence_number=10)
    body = upstream.body() + more + done + Upstream(index=2).completed().body()
    result = run(request(), body)
    second = [e for e in result.events if e.get("output_index") == 1]
    text = "".join(e["delta"] for e in second if e["type"] == "response.output_text.delta")
    assert text.startswith("Look. <")
    final = result.events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["message", "message", "function_call"]
    assert final["output"][2]["arguments"] == '{"command":"ls"}'


def test_a_later_message_s_held_text_goes_out_before_its_done_item() -> None:
    """The second message's text ends in `<` (held by its scanner) and only its done event
    ends it: the `<` reaches the client as that message's delta."""
    upstream = Upstream().created().message("First.").message("Look. ", "<", done=False)
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    done = event("response.output_item.done", output_index=1, item=item, sequence_number=10)
    result = run(request(), upstream.body() + done + Upstream(index=2).completed().body())
    second = [e for e in result.events if e.get("output_index") == 1]
    text = "".join(e["delta"] for e in second if e["type"] == "response.output_text.delta")
    assert text == "Look. <"


def test_a_call_recovered_mid_delta_is_noted_and_keeps_the_upstream_s_id() -> None:
    """Text, markup and text in one delta: the client's delta is the text on both sides; the
    call is noted as a `text_tool_call` repair naming its format, and its client id decodes
    to the id the markup gave (SPEC §4)."""
    upstream = Upstream().created().message("A " + KIMI_MARKUP + " B").completed()
    result = run(request(), upstream.body())
    final = check_grammar(result.events)
    deltas = [e["delta"] for e in result.events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "A  B"
    call = final["output"][1]
    assert decode_call_id(call["call_id"]) == "functions.bash:0"
    notes = [n for n in result.exchange.report()[0] if isinstance(n, DeltaRepaired)]
    assert [n.kind for n in notes] == ["text_tool_call"]
    assert isinstance(notes[0].detail, str) and notes[0].detail
