"""Responses call ids (SPEC §8): what the client gets, and how it decodes back without state.

A rewritten `call_id` is `call_{hex8}_{raw id}` where the upstream issued a non-empty id of at
most 50 characters: a later request (even one that only carries a `function_call_output`,
with the call itself stored upstream under `previous_response_id`) then recovers the raw id
from the client id alone. `hex8` is random per client response and shared by its calls, so
the same raw id in two responses still gives two client ids. Without a raw id, or with one
too long for Responses' 64-character `call_id` limit once prefixed, the id is Chat
Completions' `call_{turn}_{idx}_{hex8}` (its digest still serves SPEC §5's second form).

A raw id that already looks like an encoded one is never kept: decoding must be unambiguous.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from proxy.core.decide import Decision
from proxy.core.ids import REASON_INVALID

# Responses `call_id`s may be at most 64 characters: `call_` + 8 + `_` leave 50 for the raw id.
MAX_ENCODED_RAW = 50
_ENCODED_RE = re.compile(r"call_[0-9a-f]{8}_(.+)", re.DOTALL)


def decode_call_id(client_id: str) -> str | None:
    """The raw id a `call_{hex8}_{raw}` client id carries, or None for any other id."""
    match = _ENCODED_RE.fullmatch(client_id)
    return match.group(1) if match else None


def encode_call_id(hex8: str, raw_id: str) -> str:
    return f"call_{hex8}_{raw_id}"


class CallIds:
    """Client `call_id`s and item `id`s for one client response, across its rounds."""

    def __init__(self, entropy: Callable[[int], bytes], taken: frozenset[str]):
        self._entropy = entropy
        self._hex8 = entropy(4).hex()
        self._taken = taken  # the client ids the history already holds
        self._given: set[str] = set()  # call ids given out in this response
        self._item_ids: set[str] = set()  # item ids given out in this response

    def client_id(self, decision: Decision, raw_id: str | None) -> tuple[str, str | None]:
        """The call's `call_id` and why it differs from the raw id (None: kept).

        `decision` is Chat Completions' keep-or-mint answer (SPEC §2); a kept id stays kept
        unless it would read as an encoded one, a rewritten one is encoded when it can be."""
        client_id, reason = decision.client_id, decision.reason
        if reason is None and decode_call_id(client_id) is not None:
            reason = REASON_INVALID
        if reason is not None and raw_id and len(raw_id) <= MAX_ENCODED_RAW:
            client_id = encode_call_id(self._hex8, raw_id)
            while client_id in self._given or client_id in self._taken:
                # The same raw id twice in one response (different arguments): each call
                # keeps its own id, and both still decode to what the upstream issued.
                client_id = encode_call_id(self._entropy(4).hex(), raw_id)
        self._given.add(client_id)
        return client_id, reason

    def item_id(self, raw: object, prefix: str = "fc_") -> str:
        """SPEC §8: the item `id` is kept as sent, minted `fc_...` when absent, empty or
        repeated in this response (rounds included: the SDKs refuse two items of one id)."""
        if isinstance(raw, str) and raw.strip() and raw not in self._item_ids:
            self._item_ids.add(raw)
            return raw
        minted = prefix + self._entropy(12).hex()
        while minted in self._item_ids:
            minted = prefix + self._entropy(12).hex()
        self._item_ids.add(minted)
        return minted

    def other_item_id(self, raw: object) -> object:
        """A message's or reasoning item's `id`: kept (absent too), unless an earlier item of
        this response has it; then a fresh one with the same prefix (`msg_`, `rs_`)."""
        if not isinstance(raw, str) or not raw or raw not in self._item_ids:
            if isinstance(raw, str):
                self._item_ids.add(raw)
            return raw
        head, sep, _ = raw.partition("_")
        return self.item_id(None, f"{head}_" if sep else "item_")
