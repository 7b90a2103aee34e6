"""History fingerprints are memoized for short argument texts (proxy.core.ids.fingerprint):
the memo must answer what the computation answers, and stay bounded."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import ids

JSON_TEXTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(value=JSON_TEXTS, spaced=st.booleans())
def test_a_memoized_fingerprint_is_the_computed_one(value: object, spaced: bool) -> None:
    text = json.dumps(value, indent=1 if spaced else None)
    expected = ("bash", ids.canonical_arguments(text))
    assert ids.fingerprint("bash", text) == expected
    assert ids.fingerprint("bash", text) == expected  # the second time from the memo


def test_text_that_is_not_json_and_objects_keep_their_own_rules() -> None:
    assert ids.fingerprint("bash", "{not json") == ("bash", "{not json")
    assert ids.fingerprint("bash", {"b": 1, "a": [2]}) == ("bash", '{"a":[2],"b":1}')


def test_long_texts_are_not_kept() -> None:
    before = ids._canonical_text.cache_info().currsize
    long_text = '{"content": "' + "x" * ids._ARGS_CACHE_CHARS + '"}'
    assert ids.fingerprint("write", long_text) == ("write", ids.canonical_arguments(long_text))
    assert ids._canonical_text.cache_info().currsize == before
    assert ids._canonical_text.cache_info().maxsize == ids._ARGS_CACHE_SIZE
