"""SPEC §2 (native vs counter-shaped ids, absent ids, minting), §0 (fingerprints), §3 (alnum9)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.ids import (
    REASON_ABSENT,
    REASON_COUNTER,
    REASON_INVALID,
    alnum9_id,
    canonical_arguments,
    fingerprint,
    is_counter_shaped,
    is_native,
    kimi_id,
    mint_client_id,
    minted_digest,
    normalize_raw_id,
    raw_id_digest,
    rejection_reason,
)

NATIVE = [
    "call_79382389",  # a longer digit run is random enough
    "814890118",  # LM Studio
    "365174485",
    "call_abc123XYZ",
    "call_" + "a" * 24,  # OpenAI's shape
    "aB3dE5gH9",  # Mistral's 9 alphanumerics
    "toolu_01A09q90qw90lq917835lq9",  # Anthropic's shape
    "x" * 40,  # exactly OpenAI's limit
    "call_12345",  # 5 digits is not a small number
    "tool_12345_read_file",
    "12345",
    "a",
]

COUNTER_SHAPED = [
    "0",
    "17",
    "123",
    "9999",
    "call_0",
    "call_1",
    "tool_3",
    "read_file_0",
    "run_shell_command_1",
    "grep_3",
    "call-2",  # `-` separator
    "tool_0_read_file",  # OpenRouter style
    "tool_12_run_shell_command",
]

INVALID = [
    "functions.read_file:0",  # Kimi (vLLM, SGLang)
    "read_file:0",  # Moonshot hosted
    "x:0",
    "functions.x:0",
    "chatcmpl-tool-" + "0123456789abcdef" * 2,  # older vLLM: 46 characters
    "call_0_" + "12345678-1234-1234-1234-123456789abc",  # DeepSeek: 43 characters
    "x" * 41,
    "has space",
    "ünïcode",
    "call/1",
]


@pytest.mark.parametrize("raw_id", NATIVE)
def test_native_ids_are_kept(raw_id: str) -> None:
    assert is_native(raw_id)
    assert not is_counter_shaped(raw_id)
    assert rejection_reason(raw_id) is None


@pytest.mark.parametrize("raw_id", COUNTER_SHAPED)
def test_counter_shaped_ids_are_not_native(raw_id: str) -> None:
    assert is_counter_shaped(raw_id)
    assert not is_native(raw_id)
    assert rejection_reason(raw_id) == REASON_COUNTER


@pytest.mark.parametrize("raw_id", INVALID)
def test_ids_outside_charset_or_length_are_not_native(raw_id: str) -> None:
    assert not is_native(raw_id)
    assert rejection_reason(raw_id) == REASON_INVALID


def test_vllm_long_id_is_46_characters() -> None:
    assert len("chatcmpl-tool-" + "0" * 32) == 46


def test_absent_id_reason() -> None:
    assert rejection_reason(None) == REASON_ABSENT


@settings(max_examples=300, deadline=None)
@given(raw_id=st.one_of(st.none(), st.text(max_size=50), st.sampled_from(NATIVE + INVALID)))
def test_the_memoized_reason_is_the_computed_one(raw_id: str | None) -> None:
    # rejection_reason is memoized like the digests (a counter-restarting upstream sends the
    # same raw ids every response): asked twice, it answers what the function computes.
    computed = rejection_reason.__wrapped__(raw_id)
    assert rejection_reason(raw_id) == computed
    assert rejection_reason(raw_id) == computed


def test_the_reason_memo_is_bounded() -> None:
    from proxy.core import ids

    assert rejection_reason.cache_info().maxsize == ids._ID_CACHE_SIZE


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0"),
        (17, "17"),
        (365174485, "365174485"),
        (3.0, "3"),
        ("call_x", "call_x"),
        ("0", "0"),
        (None, None),
        ("", None),
        ("   ", None),
        ("\t\n", None),
        ("null", None),
        (True, None),
        (False, None),
        (2.5, None),
        ([], None),
        ({"id": "x"}, None),
    ],
)
def test_normalize_raw_id(value: object, expected: str | None) -> None:
    assert normalize_raw_id(value) == expected


def test_mint_client_id_format() -> None:
    minted = mint_client_id(12, 3, "0a1b", "functions.run_shell_command:0")
    # SPEC §2.2: the random half, then four hex digits of the raw id's digest
    assert minted == "call_12_3_0a1b4da1"
    assert is_native(minted)
    assert minted_digest(minted) == raw_id_digest("functions.run_shell_command:0") == "4da1"


def test_raw_id_digest_is_fixed_across_processes_and_versions() -> None:
    # Another replica, or the next release, must read the digest this one minted: pinned.
    assert raw_id_digest("call_0") == "23fd"
    # An absent raw id digests as the empty string.
    assert raw_id_digest(None) == raw_id_digest("") == "b1fe"


@given(st.text(max_size=60), st.text(min_size=4, max_size=4, alphabet="0123456789abcdef"))
def test_minted_digest_reads_back_what_mint_wrote(raw: str, hex4: str) -> None:
    minted = mint_client_id(3, 1, hex4, raw)
    assert minted_digest(minted) == raw_id_digest(raw)
    assert re.fullmatch(r"[0-9a-f]{4}", raw_id_digest(raw))


@pytest.mark.parametrize(
    "client_id",
    ["call_abc", "call_1_0_dead", "call_1_0_DEADBEEF", "functions.f:0", "xcall_1_0_deadbeef"],
)
def test_only_minted_ids_carry_a_digest(client_id: str) -> None:
    assert minted_digest(client_id) is None


def test_minted_ids_fit_40_characters_for_large_turns() -> None:
    minted = mint_client_id(99999, 9999, "ffff", "x" * 200)
    assert len(minted) <= 40
    assert re.fullmatch(r"[A-Za-z0-9_-]+", minted)
    assert not is_counter_shaped(minted)


def test_kimi_id() -> None:
    assert kimi_id("read_file", 4) == "functions.read_file:4"


# -- fingerprints (SPEC §0) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ('{"a":1,"b":2}', '{"b":2,"a":1}'),  # key order
        ('{"a": 1, "b": [1, 2]}', '{"a":1,"b":[1,2]}'),  # insignificant whitespace
        ('{"x":{"b":1,"a":{"d":1,"c":2}}}', '{"x":{"a":{"c":2,"d":1},"b":1}}'),  # recursive
        ('{"p":"é"}', '{"p":"\\u00e9"}'),  # escaped vs literal non-ASCII
        ('{"a":1}', {"a": 1}),  # an object compares like its string
        ("\n {}\t", "{}"),
    ],
)
def test_equal_fingerprints(a: object, b: object) -> None:
    assert canonical_arguments(a) == canonical_arguments(b)
    assert fingerprint("f", a) == fingerprint("f", b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ('{"a":[1,2]}', '{"a":[2,1]}'),  # array order is kept
        ('{"a":1}', '{"a":"1"}'),
        ('{"a":1}', '{"a":2}'),
        ("{not json", "{not  json"),  # invalid JSON compares raw
        ('{"s":"a b"}', '{"s":"a  b"}'),  # whitespace inside strings is significant
    ],
)
def test_different_fingerprints(a: object, b: object) -> None:
    assert canonical_arguments(a) != canonical_arguments(b)


def test_fingerprint_includes_the_name() -> None:
    assert fingerprint("a", "{}") != fingerprint("b", "{}")


def test_canonical_form_is_compact_sorted_and_unescaped() -> None:
    assert canonical_arguments('{ "b" : [1, {"d":1, "c":2}], "a": "\\u00e9 世界"}') == (
        '{"a":"é 世界","b":[1,{"c":2,"d":1}]}'
    )
    assert canonical_arguments({"b": 1, "a": {"z": None, "y": True}}) == (
        '{"a":{"y":true,"z":null},"b":1}'
    )


def test_invalid_json_is_its_raw_string() -> None:
    assert canonical_arguments('{"a": 1') == '{"a": 1'
    assert canonical_arguments("") == ""


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=10,
)


@settings(max_examples=80, deadline=None)
@given(
    value=st.dictionaries(st.text(max_size=4), json_values, max_size=4),
    indent=st.booleans(),
    ascii=st.booleans(),
)
def test_canonical_ignores_formatting(value: object, indent: bool, ascii: bool) -> None:
    import json

    text = json.dumps(value, indent=2 if indent else None, ensure_ascii=ascii)
    assert canonical_arguments(text) == canonical_arguments(value)
    assert json.loads(canonical_arguments(text)) == value


# -- alnum9 (SPEC §3) ---------------------------------------------------------------------------


def test_alnum9_keeps_ids_that_fit() -> None:
    assert alnum9_id("aB3dE5gH9") == "aB3dE5gH9"


@settings(max_examples=200, deadline=None)
@given(client_id=st.text(min_size=1, max_size=60), salt=st.integers(0, 10**9))
def test_alnum9_is_nine_alnum_and_deterministic(client_id: str, salt: int) -> None:
    out = alnum9_id(client_id, salt)
    assert re.fullmatch(r"[A-Za-z0-9]{9}", out)
    assert alnum9_id(client_id, salt) == out


def test_alnum9_differs_by_input_and_salt() -> None:
    assert alnum9_id("call_1_0_deadbeef") != alnum9_id("call_1_1_deadbeef")
    assert alnum9_id("call_1_0_deadbeef", 0) != alnum9_id("call_1_0_deadbeef", 1)
    many = {alnum9_id(f"call_{i}") for i in range(2000)}
    assert len(many) == 2000
