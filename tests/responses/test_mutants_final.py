"""SPEC §8: what the mutation audit found unpinned in matching the upstream's final items to
the streamed ones (proxy/responses/final.py). The unit is the point here: which final item
describes which streamed item, for inputs a stream rarely builds."""

from __future__ import annotations

from typing import Any

from proxy.responses.final import Streamed, final_items


def _client(final: dict[str, Any]) -> dict[str, Any]:
    return {**final, "seen": True}


def entry(
    index: int, upstream: object, item_id: object, call_id: str | None = None, kind: str = "m"
) -> Streamed:
    return Streamed(index, upstream, kind, item_id, call_id, _client)


def test_a_final_output_that_is_no_list_describes_nothing() -> None:
    assert final_items([entry(0, 0, None)], {"a": {"type": "m"}}) == {}
    assert final_items([entry(0, 0, None)], "m") == {}


def test_an_id_that_is_no_string_does_not_name_an_item() -> None:
    """The streamed item's `id` 5 is no id: the final item at its place describes it, not
    the one whose `id` is 5 too."""
    output = [{"type": "m", "id": 7, "n": 0}, {"type": "m", "id": 5, "n": 1}]
    assert final_items([entry(0, 0, 5)], output) == {0: {**output[0], "seen": True}}


def test_an_id_streamed_twice_places_its_items_by_position() -> None:
    output = [{"type": "m", "n": 0}, {"type": "m", "id": "x", "n": 1}]
    found = final_items([entry(0, 0, "x"), entry(1, 1, "x")], output)
    assert found == {0: {**output[0], "seen": True}, 1: {**output[1], "seen": True}}


def test_a_final_item_naming_another_id_does_not_describe_the_streamed_one() -> None:
    assert final_items([entry(0, 0, "a")], [{"type": "m", "id": "zzz"}]) == {}


def test_a_final_call_naming_another_call_id_does_not_describe_the_streamed_call() -> None:
    output = [{"type": "m", "id": "a", "call_id": "c2"}]
    assert final_items([entry(0, 0, "a", "c1")], output) == {}


def test_a_final_call_without_a_call_id_describes_the_streamed_call() -> None:
    output = [{"type": "m", "id": "a"}]
    assert final_items([entry(0, 0, "a", "c1")], output) == {0: {**output[0], "seen": True}}


def test_a_final_call_id_fits_a_streamed_call_issued_none() -> None:
    output = [{"type": "m", "id": "a", "call_id": "c2"}]
    assert final_items([entry(0, 0, "a", None)], output) == {0: {**output[0], "seen": True}}
