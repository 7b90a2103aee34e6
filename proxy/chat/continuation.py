"""What a round of a streamed response hands to the next, and how a follow-up round reads as
the same message (SPEC §5).

A round whose only calls were replays ends in `FollowupNeeded`: the shell sends the upstream
a follow-up request and streams its answer through a new core built with the `Carry`. That
round then takes the first round's `id`, `created` and `model`, drops its `role` delta, and
reports usage once, at the end, summed over the rounds.

A core never changes the `Carry` it was given: it works on its own copy and hands the next
round's in `FollowupNeeded.carry`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.guard import Replay
from proxy.core.jsontext import dumps
from proxy.core.sse import encode_event
from proxy.core.usage import add_usage


@dataclass(slots=True, init=False)
class Carry:
    """What a follow-up round inherits from the rounds before it (SPEC §5)."""

    response_id: Any
    created: Any
    model: Any
    usage: dict[str, Any] | None
    # SPEC §5: until a byte reaches the client a loop can still be a plain HTTP 422, so events
    # that show the user nothing (a first chunk with only `role`) wait here for the next one.
    head_pending: list[bytes]
    released: bool  # some bytes of this response were handed to the shell

    # Written out (init=False), the defaults here only: mypyc compiles this one; the
    # one dataclasses generates would stay Python.
    def __init__(
        self,
        response_id: Any = None,
        created: Any = None,
        model: Any = None,
        usage: dict[str, Any] | None = None,
        head_pending: list[bytes] | None = None,
        released: bool = False,
    ) -> None:
        self.response_id = response_id
        self.created = created
        self.model = model
        self.usage = usage
        self.head_pending = [] if head_pending is None else head_pending
        self.released = released


# Value objects: read-only by convention and hashed by value (unsafe_hash), not frozen: a
# frozen dataclass's __init__ sets each field through object.__setattr__, about twice the
# cost of building one, and these are built per call, per note or per event.
@dataclass(slots=True, unsafe_hash=True)
class FollowupNeeded:
    content: str
    replays: list[Replay]
    carry: Carry
    # The round's reasoning by the field the upstream sent it in (`reasoning_content`,
    # `reasoning`): thinking models reject a tool-call turn without it (QUIRKS), and the
    # follow-up request repeats the round's assistant message.
    reasoning: dict[str, str]


# The delta fields a reasoning model streams its thinking in (DeepSeek and Kimi
# `reasoning_content`; vLLM, Groq and OpenRouter `reasoning`).
REASONING_FIELDS = ("reasoning_content", "reasoning")


def reasoning_of(message: dict[str, Any]) -> dict[str, str]:
    """The reasoning fields of a whole assistant message, as the upstream sent them."""
    return {key: message[key] for key in REASONING_FIELDS if isinstance(message.get(key), str)}


class RoundContent:
    """The text of a round that may end in a follow-up, whose request repeats it (SPEC §5).
    Events forwarded without parsing are kept as their bytes, parsed only if it comes to that."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[bytes | str | _Read | _Reasoning] = []

    def add_event(self, data: bytes) -> None:
        self._items.append(data)

    def add_read(self, read: bytes, start: int = 0) -> None:
        """`read[start:]`, whole one-line `data: {...}` events, split into them only if the
        text is asked for (most rounds never are: splitting every read was a stream's largest
        cost once a round could end in a follow-up). `start` spares a copy of the read."""
        self._items.append(_Read(read, start))

    def add_delta(self, delta: dict[str, Any]) -> None:
        """A delta the general path parsed: its text and its reasoning (`add_event` and
        `add_read` keep the bytes of what was not parsed)."""
        self._items.extend(_delta_parts(delta))

    def message(self) -> tuple[str, dict[str, str]]:
        """The round's text and its reasoning by field, from one walk of its events."""
        parts: list[str] = []
        reasoning: dict[str, list[str]] = {}
        for item in self._events():
            for part in _event_parts(item) if isinstance(item, bytes) else (item,):
                if isinstance(part, str):
                    parts.append(part)
                else:
                    reasoning.setdefault(part.key, []).append(part.text)
        return "".join(parts), {key: "".join(texts) for key, texts in reasoning.items()}

    def _events(self) -> list[bytes | str | _Reasoning]:
        items: list[bytes | str | _Reasoning] = []
        for item in self._items:
            if isinstance(item, _Read):
                run = item.data[item.start : -2]
                items.extend(block[6:] for block in run.split(b"\n\n"))
            else:
                items.append(item)
        return items


def _event_parts(data: bytes) -> list[str | _Reasoning]:
    """What a follow-up repeats of an event kept as its bytes (any JSON may be there)."""
    try:
        delta = orjson.loads(data)["choices"][0]["delta"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return []
    return _delta_parts(delta) if isinstance(delta, dict) else []


def _delta_parts(delta: dict[str, Any]) -> list[str | _Reasoning]:
    """A delta's text, then its reasoning by field: what a follow-up repeats of it."""
    content = delta.get("content")
    parts: list[str | _Reasoning] = [content] if isinstance(content, str) else []
    for key in REASONING_FIELDS:
        value = delta.get(key)
        if isinstance(value, str):
            parts.append(_Reasoning(key, value))
    return parts


@dataclass(slots=True, unsafe_hash=True, init=False)
class _Reasoning:
    """A parsed delta's reasoning text, by the field it came in."""

    key: str
    text: str

    # Written out (init=False): mypyc compiles this one.
    def __init__(self, key: str, text: str) -> None:
        self.key = key
        self.text = text


@dataclass(slots=True, unsafe_hash=True, init=False)
class _Read:
    """A read of whole events, as RoundContent keeps it until its text is asked for."""

    data: bytes
    start: int  # the kept events are data[start:]

    # Written out (init=False), the defaults here only: mypyc compiles this one; the
    # one dataclasses generates would stay Python.
    def __init__(self, data: bytes, start: int = 0) -> None:
        self.data = data
        self.start = start


class Continuation:
    """A round's message identity and usage: carried in, rewritten, handed on."""

    __slots__ = ("_held_usage", "_usage_sent", "active", "carry", "envelope")

    def __init__(self, carry: Carry | None):
        self.active = carry is not None  # this round continues an earlier one
        self.carry = _own_copy(carry) if carry is not None else Carry()
        self.envelope: dict[str, Any] | None = None  # id, object, created, model of the round
        # SPEC §5: a round may turn out to be replay-only after its usage chunk passed (no
        # finish_reason); while a replay is possible, usage-only chunks wait for the round's end.
        self._held_usage: list[tuple[bytes, Any]] = []
        self._usage_sent = False

    def take_envelope(self, chunk: dict[str, Any]) -> bool:
        """The first chunk that names the response gives synthetic chunks their envelope
        (and, in a first round, the message its identity); True for that chunk."""
        if self.envelope is not None or not chunk.get("id"):
            return False
        self.envelope = {k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk}
        carry = self.carry
        if carry.response_id is None:
            carry.response_id = chunk.get("id")
            carry.created = chunk.get("created")
            carry.model = chunk.get("model")
        return True

    def rewrite(self, chunk: dict[str, Any]) -> bool:
        """In a follow-up round, the chunk as part of the first round's message; True when
        this is one (the chunk is then re-serialized)."""
        if not self.active:
            return False
        carry = self.carry
        for key, value in (
            ("id", carry.response_id),
            ("created", carry.created),
            ("model", carry.model),
        ):
            if value is not None and key in chunk:
                chunk[key] = value
        choices = chunk.get("choices")
        # any JSON may arrive here; only a list holds choices (SPEC §6: never fail on input)
        for choice in choices if isinstance(choices, list) else ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict):
                delta.pop("role", None)
        if isinstance(chunk.get("usage"), dict):
            chunk["usage"] = add_usage(carry.usage, chunk["usage"])
            carry.usage = None
            self._usage_sent = True
        return True

    def add_usage(self, usage: object) -> None:
        self.carry.usage = add_usage(self.carry.usage, usage)

    def swallow(self, data: bytes) -> None:
        """An event of a round that ends in a follow-up: only its usage counts."""
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if isinstance(chunk, dict):
            self.add_usage(chunk.get("usage"))

    def hold_usage(self, encoded: bytes, usage: object) -> None:
        self._held_usage.append((encoded, usage))

    def closing_chunks(self) -> list[bytes]:
        """The round ends the message: held usage chunks, then the rounds' summed usage."""
        out = [encoded for encoded, _ in self._held_usage]
        if self.active and self.carry.usage and not self._usage_sent:
            out.append(
                encode_event(dumps({**self.base(), "choices": [], "usage": self.carry.usage}))
            )
        return out

    def followup(
        self, content: str, replays: list[Replay], reasoning: dict[str, str] | None = None
    ) -> FollowupNeeded:
        """The round hands over to a follow-up: its held usage counts toward the total."""
        for _, usage in self._held_usage:
            self.add_usage(usage)
        return FollowupNeeded(content, replays, self.carry, reasoning or {})

    def base(self) -> dict[str, Any]:
        base = dict(self.envelope or {"object": "chat.completion.chunk"})
        carry = self.carry
        if carry.response_id is not None:
            base.update(id=carry.response_id, created=carry.created, model=carry.model)
        return base

    def synthetic(self, choice: dict[str, Any]) -> bytes:
        """A chunk the proxy writes itself (a finish the upstream never sent)."""
        return encode_event(dumps({**self.base(), "choices": [choice]}))


def _own_copy(carry: Carry) -> Carry:
    return Carry(
        carry.response_id,
        carry.created,
        carry.model,
        copy.deepcopy(carry.usage),
        list(carry.head_pending),
        carry.released,
    )
