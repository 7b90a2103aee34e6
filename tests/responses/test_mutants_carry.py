"""What the mutation audit found unpinned in proxy/responses/carry.py."""

from __future__ import annotations

from proxy.responses.carry import encode, key_of


def test_unhashable_values_key_by_their_own_repr() -> None:
    assert key_of([1]) != key_of([2])
    assert key_of([1]) == key_of([1])


def test_an_event_without_a_string_type_has_no_event_line() -> None:
    assert not encode({"type": 5, "x": 1}).startswith(b"event:")
    assert encode({"type": "a"}).startswith(b"event: a\n")
