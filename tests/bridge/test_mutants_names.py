"""SPEC §9: what a bridge left out is named in the dropped-tools header in header-safe
characters, each name cut to 64 characters and the list to 32 entries (the mutation audit
found the bounds and the replacement characters unpinned). Through the Responses mapping:
an unknown top-level field is named by its key."""

from __future__ import annotations

import pytest

from proxy.bridge.responses_chat import responses_to_chat
from tests.bridge.responses_chat.wire import body


def dropped(*fields: str) -> tuple[str, ...]:
    request = body()
    request.update(dict.fromkeys(fields, 1))
    return responses_to_chat(request)[1]


@pytest.mark.parametrize(
    ("field", "named"),
    [
        ("bad field!", "bad?field?"),
        ("", "?"),
        ("a" * 64, "a" * 64),
        ("b" * 65, "b" * 61 + "..."),
        ("c" * 63 + "é", "c" * 63 + "?"),
    ],
    ids=["unsafe-characters", "empty", "64-kept", "65-cut", "unsafe-at-the-end"],
)
def test_a_dropped_name_in_header_safe_characters_and_at_most_64(field: str, named: str) -> None:
    assert dropped(field) == (named,)


def test_32_dropped_names_are_all_listed() -> None:
    names = [f"f{n:02d}" for n in range(32)]
    assert dropped(*names) == tuple(names)


@pytest.mark.parametrize("count", [33, 40])
def test_more_than_32_dropped_names_list_31_and_how_many_more(count: int) -> None:
    names = [f"f{n:02d}" for n in range(count)]
    assert dropped(*names) == (*names[:31], f"{count - 31}-more")
