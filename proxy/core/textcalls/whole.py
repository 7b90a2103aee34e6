"""The forms without a marker: the whole message is the call (or calls).

- JSON: `{"name": "get_weather", "arguments": {...}}` (or `"parameters"`), an array of such
  objects, or several objects separated by `;` (Llama 3's parallel calls): how Hermes-2-Pro
  on Workers AI, Kimi K2 with some providers and Llama 3.x's JSON tool format answer when the
  server does not parse it.
- pythonic: `[get_weather(city="Paris"), ...]` (Llama 3.2 and 4, ToolACE and others).
- Phi-4-mini and FireFunction: `functools[{...}, ...]`.
- xLAM: the JSON call (or array) in a fenced block, "```json ... ```".

Only the entire content (trimmed) can be decided to be a call, so:

- content whose first character that is not whitespace cannot open one of the forms (`{`,
  `[`, `f`, a backtick) is passed on at once (this stage costs nothing else on ordinary text);
- content that opens like one of the forms (checked on its first characters: `{"name"` and
  the other call keys, `[name(`, `functools[{"name"`, a fence and a call object) is held while
  it can still be one: until its value ends and something the form does not allow follows
  (released), or the content ends (decided), or it passes MAX_BLOCK_CHARS (released). JSON
  content that does not start with a call key (`{"answer": 42}`) is released at its first key.

The price is latency for content that opens like a call and is not one: it reaches the client
when its value ends rather than as it streams.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from proxy.core.textcalls import jsonish
from proxy.core.textcalls.checks import (
    IDENTIFIER,
    MORE,
    NO,
    Check,
    Head,
    either,
    literal,
    named,
    then,
)
from proxy.core.textcalls.extent import JsonExtent
from proxy.core.textcalls.markers import MAX_BLOCK_CHARS
from proxy.core.textcalls.model import (
    CALL_KEYS,
    NotACall,
    Parsed,
    RecoveredCall,
    arguments_text,
    json_calls,
    name_args_object,
)

FORMAT = "json"


def _json_calls(content: str) -> list[Parsed]:
    """One call object, an array of them, or call objects separated by `;`."""
    values = jsonish.json_sequence(content, ";")
    if len(values) == 1:
        return json_calls(content)
    return [name_args_object(value) for value in values]


def _functools(content: str) -> list[Parsed]:
    return jsonish.parse_json_list(content.removeprefix("functools"))


_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.S)


def _fenced(content: str) -> list[Parsed]:
    match = _FENCE.fullmatch(content)
    if match is None:
        raise NotACall("not one fenced block")
    return json_calls(match.group(1))


def _json_tag(head: str, pos: int) -> int | None:
    """After a fence's backticks: the optional `json` language tag."""
    rest = head[pos : pos + 4]
    if rest == "json":
        return pos + 4
    if rest and "json".startswith(rest) and pos + len(rest) == len(head):
        return MORE
    return pos


def _fits(verdict: int | None) -> bool:
    return verdict is not None and verdict != NO


@dataclass(frozen=True, slots=True)
class _Form:
    name: str
    check: Check  # the content's first characters, up to the value's opening bracket or past
    parse: Callable[[str], list[Parsed]]  # the whole content, trimmed
    python: bool = False  # the value is Python's call syntax (its strings may use ')
    suffix: str = ""  # what must follow the value (a fence's end)
    separator: str = ""  # what may stand between two values


_KEY = literal(*(f'"{key}"' for key in sorted(CALL_KEYS)))
_CALL_OBJECT = either(then(literal("{"), _KEY), then(literal("["), literal("{"), _KEY))

_FORMS: tuple[_Form, ...] = (
    _Form(FORMAT, _CALL_OBJECT, _json_calls, separator=";"),
    _Form(
        "pythonic",
        then(literal("["), named("(", name=IDENTIFIER, space_after=False)),
        jsonish.parse_pythonic,
        python=True,
    ),
    _Form("phi4-mini", then(literal("functools"), literal("["), literal("{"), _KEY), _functools),
    _Form("xlam", then(literal("```"), _json_tag, _CALL_OBJECT), _fenced, suffix="```"),
)
FORMATS = tuple(form.name for form in _FORMS)
# What the content's first character that is not whitespace must be for any form to fit.
OPENERS = frozenset("{[f`")
_CHECK = either(*(form.check for form in _FORMS))
_NON_SPACE = re.compile(r"\S")
# Never fed: a message that opens no value (most of them) builds no tracker of its own.
_NOT_YET = JsonExtent()
_BRACKET = re.compile(r"[\[{]")

# Only whitespace so far / its first characters checked / in a value / after one / between
# two (after a separator) / passed on.
_WAITING, _HEAD, _INSIDE, _AFTER, _BETWEEN, _OFF = range(6)


class WholeMessage:
    __slots__ = (
        "_extent",
        "_first",
        "_form",
        "_head",
        "_matched",
        "_offered",
        "_opener",
        "_pieces",
        "_size",
        "_state",
        "examined",
        "recovered",
    )

    def __init__(self, offered_tools: frozenset[str]) -> None:
        self._offered = offered_tools
        self._state = _WAITING
        self._pieces: list[str] = []
        self._size = 0
        self._first = 0  # index in the content of its first character that is not whitespace
        self._opener = ""  # that character
        self._head = Head()
        self._form = _FORMS[0]
        self._extent = _NOT_YET  # its own once the value opens
        self._matched = 0  # characters of the form's suffix seen after the value
        self.examined = 0
        self.recovered = 0

    @property
    def holding(self) -> bool:
        return self._state != _OFF

    @property
    def in_value(self) -> bool:
        """The content so far opened a value that may be the whole message's call (a bracket
        opens one at once; `functools` or a fence once its value's bracket came)."""
        if self._state == _HEAD:
            return self._opener == "{" or self._opener == "["
        return self._state in (_INSIDE, _AFTER, _BETWEEN)

    def feed(self, text: str) -> str | None:
        """The text to pass on (all of it held so far), or None while it is held."""
        if self._state == _OFF:
            return text
        self._pieces.append(text)
        self._size += len(text)
        if self._size > MAX_BLOCK_CHARS:
            return self._release()
        pos = 0
        if self._state == _WAITING:
            first = self._next_non_space(text, 0)
            if first is None:
                return None
            if text[first] not in OPENERS:
                return self._release()
            self._first = self._size - len(text) + first
            self._opener = text[first]
            self._state, pos = _HEAD, first
        if self._state == _HEAD:
            return self._check(text, pos)
        return self._advance(text, 0)

    def passes_at_once(self, text: str) -> bool:
        """Take `text` as the first content when `feed` would pass it on at once: nothing
        seen yet, and its first character is neither whitespace nor one that opens a form
        (the whole message cannot be a call). True: the stage is where `feed(text)` would
        leave it, without keeping the text (TextCallScanner.takes_plain_start); False:
        nothing was done."""
        if (
            self._state != _WAITING
            or self._pieces
            or not text
            or text[0] in OPENERS
            or text[0].isspace()  # what _NON_SPACE (`\S`) calls whitespace
        ):
            return False
        self.examined += 1  # the one character feed would look at
        self._state = _OFF
        return True

    def end(self) -> list[RecoveredCall] | str:
        """The calls the whole content was, or the text to pass on."""
        if self._state == _AFTER and self._matched == len(self._form.suffix):
            calls = self._calls("".join(self._pieces))
            if calls is not None:
                self.recovered = len(calls)
                self._state = _OFF
                self._pieces = []
                return calls
        return self._release() if self._state != _OFF else ""

    def _next_non_space(self, text: str, pos: int) -> int | None:
        found = _NON_SPACE.search(text, pos)
        self.examined += (found.end() if found else len(text)) - pos
        return found.start() if found else None

    def _check(self, text: str, pos: int) -> str | None:
        """Which form the content opens, decided on its first characters; then its value is
        followed from its opening bracket (in the content so far, joined once)."""
        self._head.take(text, pos)
        verdict, looked_at = self._head.verdict(_CHECK)
        self.examined += looked_at
        if verdict is None:
            return None
        if verdict == NO:
            return self._release()
        head = self._head.text()
        self._head = Head()
        self._form = next(f for f in _FORMS if _fits(f.check(head, 0)))
        self._extent = JsonExtent(self._form.python)
        bracket = _BRACKET.search(head)
        assert bracket is not None  # every form's check passes an opening bracket
        content = "".join(self._pieces)
        self._pieces = [content]
        self._state = _INSIDE
        return self._advance(content, self._first + bracket.start())

    def _advance(self, text: str, pos: int) -> str | None:
        """Follow the value(s) through `text` from `pos`: None while the content may still be
        a call, else all of it to pass on."""
        while True:
            if self._state == _INSIDE:
                before = self._extent.examined
                stop = self._extent.feed(text, pos)
                self.examined += self._extent.examined - before
                if stop is None:
                    return None
                self._state, self._matched, pos = _AFTER, 0, stop
            if self._state == _BETWEEN:
                found = self._next_non_space(text, pos)
                if found is None:
                    return None
                if text[found] not in "{[":
                    return self._release()
                self._extent = JsonExtent()
                self._state, pos = _INSIDE, found
                continue
            return self._after(text, pos)

    def _after(self, text: str, pos: int) -> str | None:
        """After a value: the form's suffix, then only whitespace (or, where the form allows
        it, a separator and the next value)."""
        suffix = self._form.suffix
        if self._matched < len(suffix):
            if self._matched == 0:
                found = self._next_non_space(text, pos)
                if found is None:
                    return None
                pos = found
            piece = text[pos : pos + len(suffix) - self._matched]
            self.examined += len(piece)
            if not suffix.startswith(piece, self._matched):
                return self._release()
            self._matched += len(piece)
            pos += len(piece)
        found = self._next_non_space(text, pos)
        if found is None:
            return None
        if self._form.separator and text.startswith(self._form.separator, found):
            self._state = _BETWEEN
            return self._advance(text, found + len(self._form.separator))
        return self._release()

    def _calls(self, content: str) -> list[RecoveredCall] | None:
        self.examined += len(content)
        try:
            parsed = self._form.parse(content.strip())
        except NotACall:
            return None
        if not parsed or not all(name in self._offered for name, _, _ in parsed):
            return None
        return [
            RecoveredCall(name, arguments_text(args), raw_id, self._form.name)
            for name, args, raw_id in parsed
        ]

    def _release(self) -> str:
        text = "".join(self._pieces)
        self._pieces = []
        self._state = _OFF
        return text
