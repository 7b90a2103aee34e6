"""Request direction (SPEC §3): translate the history's tool-call ids into the upstream dialect.

Rules this module follows:
- Pure: the same history always yields the same upstream request, and appending messages
  never changes how earlier calls were translated (ids depend only on what precedes them),
  so prompt caches stay warm and any replica can serve any turn.
- Repair: a `tool` message pairs with the first still-unanswered call of its id in the nearest
  earlier assistant message that has one; repeated ids get deterministic unique upstream ids.
- Nothing else changes: arguments given as objects become JSON strings, and a history that
  needs no translation is forwarded byte for byte.
It also extracts what the response side needs to know: the turn, the ids the client already
holds, and which upstream ids were answered with which fingerprint (SPEC §5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.chat.ids import (
    alnum9_id,
    derived_unique_id,
    fingerprint,
    kimi_id,
    minted_digest,
    raw_id_digest,
)
from proxy.jsontext import dumps

Fingerprint = tuple[str, str]

# SPEC §5: which of the two ids a replay came back under.
FORM_UPSTREAM = "upstream id"  # the id this request sent upstream for the answered call
FORM_ISSUED = "issued id"  # the id the upstream first issued (kept, or a minted id's digest)


@dataclass(frozen=True, slots=True)
class ReplayMatch:
    """The answered call a replay repeats: how it was recognized and the id the client knows."""

    form: str
    client_id: str | None


@dataclass(frozen=True, slots=True)
class HistoryFacts:
    """What the response side must know about the request (no client data beyond ids)."""

    turn: int = 1
    client_ids: frozenset[str] = frozenset()
    # upstream id -> fingerprint of the first answered call sent under that id
    answered: Mapping[str, Fingerprint] = field(default_factory=dict)
    tool_call_count: int = 0
    dialect: str = "passthrough"
    choices: int = 1
    offered_tools: frozenset[str] = frozenset()
    # upstream id of an answered call -> the client id the history holds for it
    answered_client_ids: Mapping[str, str] = field(default_factory=dict)
    # SPEC §5's second form, for answered calls: a client id that is not minted (kept as the
    # upstream issued it) -> {fingerprint: client id}; a minted one's raw-id digest -> same.
    issued_ids: Mapping[str, Mapping[Fingerprint, str]] = field(default_factory=dict)
    issued_digests: Mapping[str, Mapping[Fingerprint, str]] = field(default_factory=dict)

    def may_be_replay(self, raw_id: str) -> bool:
        """Could a call under this raw id repeat an answered call (its arguments will tell)?"""
        return (
            raw_id in self.answered
            or raw_id in self.issued_ids
            or (bool(self.issued_digests) and raw_id_digest(raw_id) in self.issued_digests)
        )

    def replay_of(self, raw_id: str, key: Fingerprint) -> ReplayMatch | None:
        """SPEC §5: the answered call this one replays, by either form of its raw id."""
        if self.answered.get(raw_id) == key:
            return ReplayMatch(FORM_UPSTREAM, self.answered_client_ids.get(raw_id))
        for issued in (
            self.issued_ids.get(raw_id),
            self.issued_digests.get(raw_id_digest(raw_id)) if self.issued_digests else None,
        ):
            if issued is not None and key in issued:
                return ReplayMatch(FORM_ISSUED, issued[key])
        return None


@dataclass(frozen=True, slots=True)
class IdTranslation:
    client_id: str | None
    upstream_id: str
    name: str


@dataclass(slots=True)
class TranslatedRequest:
    body: dict[str, Any]
    facts: HistoryFacts
    changed: bool
    translations: list[IdTranslation]

    def to_bytes(self, original: bytes) -> bytes:
        # jsontext.dumps: a valid history nested past orjson's 254 levels must not raise
        return dumps(self.body) if self.changed else original


@dataclass(slots=True)
class _Call:
    message_pos: int
    client_id: str | None
    upstream_id: str
    name: str
    arguments: Any
    answered: bool = False


def resolve_dialect(setting: str, model: object) -> str:
    if setting != "auto":
        return setting
    name = model.lower() if isinstance(model, str) else ""
    return "kimi" if ("kimi" in name or "moonshot" in name) else "passthrough"


def _offered_tools(body: Mapping[str, Any]) -> frozenset[str]:
    names = set()
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                names.add(fn["name"])
    return frozenset(names)


class _UpstreamIds:
    """Mints upstream ids for the calls of one history, in order, in one dialect."""

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.used: set[str] = set()
        self.seen_client: set[str] = set()

    def mint(self, client_id: str | None, name: str, ordinal: int) -> str:
        if self.dialect == "kimi":
            upstream = kimi_id(name, ordinal)
        elif self.dialect == "alnum9":
            base = client_id if client_id is not None else f"\x00{ordinal}"
            salt = 0 if client_id not in self.seen_client else ordinal + 1
            upstream = alnum9_id(base, salt)
            while upstream in self.used:
                salt += 1_000_003
                upstream = alnum9_id(base, salt)
        else:
            if client_id is not None and client_id not in self.seen_client:
                upstream = client_id
            else:
                salt = 0
                upstream = derived_unique_id(client_id or "", ordinal)
                while upstream in self.used:
                    salt += 1
                    upstream = derived_unique_id(client_id or "", ordinal, salt)
        if client_id is not None:
            self.seen_client.add(client_id)
        self.used.add(upstream)
        return upstream


def _call_parts(call: Any) -> tuple[str | None, str, Any]:
    if not isinstance(call, dict):
        return None, "", None
    raw_id = call.get("id")
    client_id = (
        raw_id if isinstance(raw_id, str) else (str(raw_id) if isinstance(raw_id, int) else None)
    )
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    name = fn.get("name")
    return client_id, name if isinstance(name, str) else "", fn.get("arguments")


def translate_request(body: dict[str, Any], dialect_setting: str) -> TranslatedRequest:
    """Translate `body['messages']` (already checked to be a list) for the upstream."""
    dialect = resolve_dialect(dialect_setting, body.get("model"))
    messages: list[Any] = body["messages"]
    n = body.get("n")
    choices = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
    calls: list[_Call] = []
    by_message: dict[int, list[_Call]] = {}
    assistants = 0
    minter = _UpstreamIds(dialect)
    tool_ids: dict[int, str] = {}  # message position -> upstream id it now answers
    for pos, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            assistants += 1
            tool_calls = message.get("tool_calls")
            if isinstance(tool_calls, list):
                own = []
                for call in tool_calls:
                    client_id, name, arguments = _call_parts(call)
                    record = _Call(
                        pos, client_id, minter.mint(client_id, name, len(calls)), name, arguments
                    )
                    calls.append(record)
                    own.append(record)
                by_message[pos] = own
        elif role == "tool":
            target = _pair_tool_message(message.get("tool_call_id"), pos, by_message)
            if target is not None:
                target.answered = True
                tool_ids[pos] = target.upstream_id

    changed = False
    out_messages = messages
    for pos, own in by_message.items():
        message = messages[pos]
        new_calls = []
        touched = False
        for call, record in zip(message["tool_calls"], own, strict=True):
            if not isinstance(call, dict):
                new_calls.append(call)
                continue
            fn = call.get("function")
            needs_string = isinstance(fn, dict) and not isinstance(fn.get("arguments"), str | None)
            if call.get("id") != record.upstream_id or needs_string:
                call = dict(call)
                call["id"] = record.upstream_id
                if needs_string and isinstance(fn, dict):
                    call["function"] = {**fn, "arguments": dumps(fn["arguments"]).decode()}
                touched = True
            new_calls.append(call)
        if touched:
            out_messages = _copy_once(out_messages, messages)
            out_messages[pos] = {**message, "tool_calls": new_calls}
            changed = True
    for pos, upstream_id in tool_ids.items():
        if messages[pos].get("tool_call_id") != upstream_id:
            out_messages = _copy_once(out_messages, messages)
            out_messages[pos] = {**messages[pos], "tool_call_id": upstream_id}
            changed = True

    answered: dict[str, Fingerprint] = {}
    answered_client_ids: dict[str, str] = {}
    issued_ids: dict[str, dict[Fingerprint, str]] = {}
    issued_digests: dict[str, dict[Fingerprint, str]] = {}
    for record in calls:
        if not record.answered:
            continue
        key = fingerprint(record.name, record.arguments)
        if record.upstream_id not in answered:
            answered[record.upstream_id] = key
            if record.client_id is not None:
                answered_client_ids[record.upstream_id] = record.client_id
        if record.client_id is not None:
            digest = minted_digest(record.client_id)
            issued = issued_ids if digest is None else issued_digests
            issued.setdefault(digest or record.client_id, {}).setdefault(key, record.client_id)
    facts = HistoryFacts(
        turn=1 + assistants,
        client_ids=frozenset(c.client_id for c in calls if c.client_id is not None),
        answered=answered,
        tool_call_count=len(calls),
        dialect=dialect,
        choices=choices,
        offered_tools=_offered_tools(body),
        answered_client_ids=answered_client_ids,
        issued_ids=issued_ids,
        issued_digests=issued_digests,
    )
    out_body = {**body, "messages": out_messages} if changed else body
    translations = [IdTranslation(c.client_id, c.upstream_id, c.name) for c in calls]
    return TranslatedRequest(out_body, facts, changed, translations)


def _copy_once(current: list[Any], original: list[Any]) -> list[Any]:
    return list(original) if current is original else current


def _pair_tool_message(
    tool_call_id: object, pos: int, by_message: dict[int, list[_Call]]
) -> _Call | None:
    """Nearest earlier assistant message with an unanswered call of this id, first such call."""
    if isinstance(tool_call_id, int) and not isinstance(tool_call_id, bool):
        tool_call_id = str(tool_call_id)
    if not isinstance(tool_call_id, str):
        return None
    fallback: _Call | None = None
    for message_pos in sorted((p for p in by_message if p < pos), reverse=True):
        for record in by_message[message_pos]:
            if record.client_id == tool_call_id:
                if not record.answered:
                    return record
                fallback = fallback or record
    # Every call of that id is answered already (a second answer): follow the latest call.
    return fallback
