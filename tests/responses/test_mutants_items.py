"""SPEC §8: what the mutation audit found unpinned in a round's items that are not calls
(proxy/responses/items.py): an item the upstream never finished, completed as its final
output lists it only where that entry can be it; a repeated item id renamed everywhere the
client sees it; the text kept by part."""

from __future__ import annotations

from typing import Any

import pytest

from tests.responses.helpers import Upstream, event, request, response_obj, run

TEXT = [{"type": "output_text", "text": "hi", "annotations": []}]


def _listed(**fields: Any) -> dict[str, Any]:
    """A final-output message with a field the stream never showed (`phase`)."""
    item = {"type": "message", "role": "assistant", "status": "completed", "content": TEXT}
    return {**item, "phase": "final_answer", **fields}


def _completed(output: object) -> bytes:
    response = response_obj("completed", output=output)
    return event("response.completed", response=response, sequence_number=99)


def _done_items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e["type"] == "response.output_item.done"]


@pytest.mark.parametrize(
    ("listed", "used"),
    [
        (_listed(id="msg_0"), True),
        (_listed(), True),  # the final entry names no id: it may be the open item
        (_listed(id=""), True),
        (_listed(id="msg_9"), False),  # another item's id
        ({**_listed(id="msg_0"), "type": "reasoning"}, False),  # another type
    ],
)
def test_an_open_message_is_completed_from_the_entry_at_its_place(
    listed: dict[str, Any], used: bool
) -> None:
    body = Upstream().created().message("hi", done=False).body() + _completed([listed])
    result = run(request(tools=[]), body)
    (done,) = _done_items(result.events)
    if used:
        assert done == listed
    else:
        assert "phase" not in done
        assert (done["id"], done["status"], done["content"]) == ("msg_0", "completed", TEXT)


def test_an_open_message_without_an_id_takes_the_entry_at_its_place() -> None:
    added = event(
        "response.output_item.added",
        output_index=0,
        item={"type": "message", "role": "assistant", "status": "in_progress", "content": []},
        sequence_number=2,
    )
    body = Upstream().created().body() + added + _completed([_listed(id="msg_5")])
    (done,) = _done_items(run(request(tools=[]), body).events)
    assert done == _listed(id="msg_5")


def test_an_open_message_past_the_end_of_the_final_output_keeps_its_own_text() -> None:
    """Two messages, the second never finished; the final output lists only the first."""
    upstream = Upstream().created().message("one").message("t", "w", "o", done=False)
    body = upstream.body() + _completed([_listed(id="msg_0")])
    result = run(request(tools=[]), body)
    second = _done_items(result.events)[1]
    assert second["id"] == "msg_1" and "phase" not in second
    assert second["content"][0]["text"] == "two"


def test_an_open_message_s_parts_are_its_own() -> None:
    """Another message's text, and another part's, are not an open message's part."""
    upstream = Upstream().created().message("one ", "more").message("two", done=False)
    part1 = event(
        "response.output_text.delta",
        item_id="msg_1",
        output_index=1,
        content_index=1,
        delta="second part",
        sequence_number=5,
    )
    result = run(request(tools=[]), upstream.body() + part1)
    final = result.events[-1]["response"]  # (no `content_part.added` for part 1: no SDK check)
    assert [p["text"] for p in final["output"][1]["content"]] == ["two", "second part"]
    assert [p["text"] for p in final["output"][0]["content"]] == ["one more"]


def test_a_message_id_an_earlier_item_used_is_renamed_everywhere() -> None:
    """Two messages under one id: the second's added item, deltas, done item and final
    entry all carry its new id."""
    upstream = Upstream().created().message("one").message("two")
    body = upstream.body().replace(b'"msg_1"', b'"msg_0"')
    final_list = [_listed(id="msg_0"), _listed(id="msg_0", content=TEXT)]
    result = run(request(tools=[]), body + _completed(final_list))
    second = [e for e in result.events if e.get("output_index") == 1]
    new_id = second[0]["item"]["id"]
    assert new_id.startswith("msg_") and new_id != "msg_0"
    assert {e["item_id"] for e in second if "item_id" in e} == {new_id}
    assert second[-1]["item"]["id"] == new_id
    output = result.events[-1]["response"]["output"]
    assert [item["id"] for item in output] == ["msg_0", new_id]


@pytest.mark.parametrize("item", [None, "oops"])
def test_text_of_an_item_never_added_is_completed_as_an_assistant_message(item: object) -> None:
    """Deltas at an index no `output_item.added` opened, then a done event without an item
    object: the client's done item is an assistant message with the text it got."""
    deltas = b"".join(
        event(
            "response.output_text.delta",
            item_id="msg_0",
            output_index=0,
            content_index=0,
            delta=text,
            sequence_number=n,
        )
        for n, text in enumerate(["a", "b"], 2)
    )
    done = event("response.output_item.done", output_index=0, item=item, sequence_number=4)
    body = Upstream().created().body() + deltas + done + _completed([])
    (final,) = _done_items(run(request(tools=[]), body).events)
    content = [{"type": "output_text", "text": "ab", "annotations": []}]
    assert final == {
        "type": "message",
        "role": "assistant",
        "content": content,
        "status": "completed",
    }


def test_an_unfinished_message_s_text_is_only_its_output_text() -> None:
    """A refusal's deltas are not output text: a message that never finishes is completed
    with the output text parts the client got, none from them."""
    upstream = Upstream().created().message("hi", done=False)
    refusal = event(
        "response.refusal.delta",
        item_id="msg_0",
        output_index=0,
        content_index=1,
        delta="no",
        sequence_number=7,
    )
    result = run(request(tools=[]), upstream.body() + refusal)
    (done,) = _done_items(result.events)
    assert done["content"] == TEXT


@pytest.mark.parametrize("done", [True, False])
def test_text_the_scanner_holds_goes_out_before_the_message_ends(done: bool) -> None:
    """With offered tools, a message whose text ends in what may open markup (`<`), ended
    by its `output_item.done` alone (or by the body's end): the held text goes out as a
    delta of that message before its done item, which carries all of it."""
    upstream = Upstream().created().message("Hello ", "<", done=False)
    body = upstream.body()
    if done:
        item = {
            "type": "message",
            "id": "msg_0",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hello <", "annotations": []}],
        }
        body += event("response.output_item.done", output_index=0, item=item, sequence_number=9)
    result = run(request(), body + _completed([]))
    deltas = [e for e in result.events if e["type"] == "response.output_text.delta"]
    assert "".join(e["delta"] for e in deltas) == "Hello <"
    assert {(e["item_id"], e["output_index"], e["content_index"]) for e in deltas} == {
        ("msg_0", 0, 0)
    }
    (final,) = _done_items(result.events)
    assert final["content"][0]["text"] == "Hello <"


def test_a_message_streamed_without_an_id_is_listed_without_one() -> None:
    """The client saw the message without an `id`: the completed output's entry for it (which
    names one) is taken without it."""
    item = {"type": "message", "role": "assistant", "status": "in_progress", "content": []}
    added = event("response.output_item.added", output_index=0, item=item, sequence_number=2)
    finished = {**item, "status": "completed", "content": TEXT}
    done = event("response.output_item.done", output_index=0, item=finished, sequence_number=3)
    body = Upstream().created().body() + added + done + _completed([_listed(id="msg_5")])
    result = run(request(tools=[]), body)
    (listed,) = result.events[-1]["response"]["output"]
    assert listed == _listed()
    assert "id" not in listed


def test_parts_whose_index_is_not_a_number_are_ordered_by_how_the_index_reads() -> None:
    """An unfinished message's parts: by index, then those whose index is not a number, in
    the order of the index's text (not of arrival)."""
    deltas = b"".join(
        event(
            "response.output_text.delta",
            item_id="msg_0",
            output_index=0,
            content_index=index,
            delta=text,
            sequence_number=5,
        )
        for index, text in (("x", "str"), ([2], "list"), (0, "zero"))
    )
    body = Upstream().created().message(done=False).body() + deltas
    (done,) = _done_items(run(request(tools=[]), body).events)
    # `[2]` is keyed as its text "[2]", which reads before "x".
    assert [part["text"] for part in done["content"]] == ["zero", "list", "str"]
