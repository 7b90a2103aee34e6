"""Tool-call ids: which raw ids are native, how client ids are minted, and upstream dialects.

SPEC §2: a raw id is *native* (kept verbatim) when it is 1-40 characters of `[A-Za-z0-9_-]`
and not *counter-shaped* (an id that only numbers calls within one response and will come
back next turn). Everything else is rewritten to `call_{turn}_{idx}_{hex8}`, whose last four hex
digits are a digest of the raw id it replaced: a later request can then recognize a replay
under the id the upstream first issued (SPEC §5) without any state in the proxy.
SPEC §3: dialects turn client ids into what an upstream expects in its history.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any

import orjson

from proxy.core.jsontext import dumps

_NATIVE_RE = re.compile(r"[A-Za-z0-9_-]{1,40}")
# A "small number" is 1-4 digits: ids like these count calls and recur every turn.
_COUNTER_RE = re.compile(
    r"\d{1,4}"  # bare small number: 0, 17, 123
    r"|[A-Za-z_]+[_-]\d{1,4}"  # call_0, tool_3, read_file_0, run_shell_command_1
    r"|tool_\d{1,4}_[A-Za-z0-9_-]+"  # OpenRouter: tool_0_read_file
)
_ALNUM9_RE = re.compile(r"[A-Za-z0-9]{9}")
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

# Reasons a client id differs from the raw id (also metric labels).
REASON_ABSENT = "absent"
REASON_INVALID = "invalid"
REASON_COUNTER = "counter_shaped"
REASON_COLLISION = "colliding"
REASON_DUPLICATE = "duplicate_in_response"
REASON_POLICY = "policy_always"


def normalize_raw_id(value: object) -> str | None:
    """SPEC §2.3: numbers become decimal strings; missing, empty, "null" or odd types are absent."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if not isinstance(value, str):
        return None
    if not value.strip() or value == "null":
        return None
    return value


def is_counter_shaped(raw_id: str) -> bool:
    return _COUNTER_RE.fullmatch(raw_id) is not None


def is_valid_client_id(raw_id: str) -> bool:
    """Fits every known provider's rules: OpenAI's 40 characters, Anthropic's charset."""
    return _NATIVE_RE.fullmatch(raw_id) is not None


def is_native(raw_id: str) -> bool:
    return is_valid_client_id(raw_id) and not is_counter_shaped(raw_id)


# Pure functions of an id, memoized: an agent's every turn re-sends its whole history, and
# counter-restarting upstreams issue the same raw ids in every response (`functions.bash:0`),
# so the same ids are digested again and again (a blake2b digest or a regex match is several
# thousand instructions, a cache hit a few hundred). Bounded, so any traffic is safe.
_ID_CACHE_SIZE = 4096


@functools.lru_cache(maxsize=_ID_CACHE_SIZE)
def rejection_reason(raw_id: str | None) -> str | None:
    """Why a raw id cannot be kept on its own merits (collisions are checked by the caller)."""
    if raw_id is None:
        return REASON_ABSENT
    if not is_valid_client_id(raw_id):
        return REASON_INVALID
    if is_counter_shaped(raw_id):
        return REASON_COUNTER
    return None


@functools.lru_cache(maxsize=_ID_CACHE_SIZE)
def raw_id_digest(raw_id: str | None) -> str:
    """SPEC §2.2: four lowercase hex digits of a digest of the raw id (absent: the empty string).

    Stable across processes and versions (a replica must read what another minted), so a
    keyed or salted hash would not do; blake2b with a 2-byte digest is cheap and well spread.
    """
    data = (raw_id or "").encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=2).hexdigest()


def mint_client_id(
    turn: int, idx: int, hex4: str, raw_id: str | None, prefix: str = "call_"
) -> str:
    """SPEC §2.2: `call_{turn}_{idx}_{hex8}`, unique across the history, at most 40 chars
    (`toolu_...` on Anthropic Messages, SPEC §8: `prefix`).

    `hex4` is the random half, one per response and choice; the digest of the raw id follows.
    """
    return f"{prefix}{turn}_{idx}_{hex4}{raw_id_digest(raw_id)}"


# What mint_client_id writes, on every surface: the digest is the last four of the eight hex
# digits.
_MINTED_RE = re.compile(r"(?:call|toolu)_\d+_\d+_[0-9a-f]{4}([0-9a-f]{4})")


@functools.lru_cache(maxsize=_ID_CACHE_SIZE)
def minted_digest(client_id: str) -> str | None:
    """The raw-id digest a minted client id carries, or None for any other id."""
    match = _MINTED_RE.fullmatch(client_id)
    return match.group(1) if match else None


def kimi_id(name: str, counter: int) -> str:
    return f"functions.{name}:{counter}"


def _digest(*parts: str) -> bytes:
    return hashlib.blake2b(
        "\x00".join(parts).encode("utf-8", "surrogatepass"), digest_size=16
    ).digest()


def alnum9_id(client_id: str, salt: int = 0) -> str:
    """Mistral's rule: exactly 9 of [A-Za-z0-9], derived deterministically from the client id."""
    if salt == 0 and _ALNUM9_RE.fullmatch(client_id):
        return client_id
    number = int.from_bytes(_digest(client_id, str(salt)), "big")
    chars = []
    for _ in range(9):
        number, rem = divmod(number, 62)
        chars.append(_BASE62[rem])
    return "".join(chars)


def derived_unique_id(client_id: str, ordinal: int, salt: int = 0) -> str:
    """A deterministic stand-in for a history id that repeats (passthrough repair, SPEC §3)."""
    return "call_" + _digest(client_id, str(ordinal), str(salt)).hex()[:24]


def canonical_arguments(arguments: Any) -> str:
    """SPEC §0: keys sorted recursively, no insignificant whitespace, non-ASCII unescaped.

    Strings that are not valid JSON compare as their raw text.
    """
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
    else:
        value = arguments
    # orjson refuses integers beyond 64 bits and nesting past 254 levels; jsontext then writes
    # the same canonical form iteratively (the stdlib's recursive encoder overflows the stack).
    return dumps(value, sort_keys=True).decode()


# An agent re-sends its whole history every turn, so each request fingerprints every answered
# call again (a parse and a sorted dump: about 5K instructions for a short call): the canonical
# form of short argument texts is memoized like the ids above. Only short ones, so the cache
# holds at most _ARGS_CACHE_SIZE x _ARGS_CACHE_CHARS characters (twice: text and form).
_ARGS_CACHE_SIZE = 1024
_ARGS_CACHE_CHARS = 2048


def fingerprint(name: str, arguments: Any) -> tuple[str, str]:
    """A history call's (name, canonical arguments): what SPEC §5 compares a replay with."""
    if isinstance(arguments, str) and len(arguments) <= _ARGS_CACHE_CHARS:
        return (name, _canonical_text(arguments))
    return (name, canonical_arguments(arguments))


@functools.lru_cache(maxsize=_ARGS_CACHE_SIZE)
def _canonical_text(arguments: str) -> str:
    return canonical_arguments(arguments)
