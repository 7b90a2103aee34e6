"""Repeat guard (SPEC §10): the same call re-issued under fresh ids, seen in the history alone.

A model that has lost track issues the same call (same tool, same arguments) under a new id,
round after round, and gets the same result each time. No id rule catches it: SPEC §5 rightly
lets the same arguments under a new id run (tools are re-run legitimately). Every request
carries the whole history, so the run is read from it without state:
- a *round* is one model turn's calls as a set of fingerprints (tool name, canonical
  arguments), so parallel duplicates count once, with its results as a set of (fingerprint,
  digest of the result's content);
- the *run* is the number of consecutive rounds at the end of the history with the same calls
  and the same results. A round with a different call or a different result, a round not
  wholly answered, a turn without calls, or user input between rounds ends it;
- from a run of `NOTE_AT` the last tool result sent upstream carries a short note (in the
  tool's own message: a new user message was ignored by models and refused by strict
  providers); from a run of `BLOCK_AT` a further identical call is answered by the proxy
  instead of being forwarded, and one more after that stops the response;
- tools that wait or poll (`repeat_exempt` globs) are never noted, blocked or stopped.
Only the turns since the last user input are looked at, and only when there are at least
`NOTE_AT` of them: a history without repeats pays one comparison.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Final, Protocol

import orjson

from proxy.core.ids import fingerprint

Fingerprint = tuple[str, str]

NOTE_AT: Final = 3  # identical rounds before the note
BLOCK_AT: Final = 4  # identical rounds after which the next identical call is not forwarded

# SPEC §10's defaults: names of tools whose purpose is to wait or poll.
DEFAULT_EXEMPT: Final = ("*wait*", "*sleep*", "*poll*", "*status*", "*check*", "write_stdin")

# `repeat_guard` per route: the note and the block (on), the note only, or nothing.
MODES: Final = ("on", "note", "off")

REPEAT_NOTE = (
    "[toolcall-proxy] Note: this call to {names} was just made {count} times in a row with "
    "the same arguments and got the same result each time. Use this result, change the "
    "arguments, or say that you are waiting for something; repeating the same call will not "
    "give a different result."
)

REPEAT_ANSWER = (
    'Repeated tool call not executed: this call to "{name}" has the same arguments as the '
    "previous {count} calls, which all returned the same result, so the proxy did not run it "
    "again. Use the earlier result, change the arguments, or explain what you are waiting for."
)


@dataclass(slots=True, unsafe_hash=True)
class RepeatRun:
    """The run of identical rounds at the end of a history (read-only by convention)."""

    count: int
    calls: frozenset[Fingerprint]
    names: tuple[str, ...]  # the calls' tool names, sorted, once each


class Unanswered:
    """A call's result before one is told (`None` is a result's possible content)."""


UNANSWERED: Final = Unanswered()


class RoundCall(Protocol):
    """What the repeat guard reads of one call of the history (the ledger's `LedgerCall`)."""

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> Any: ...

    @property
    def result(self) -> Any: ...


# What agents add to a tool's output that changes on every run whatever the command did (SPEC
# §10), compared without it (what is forwarded is unchanged). Whole lines: Codex's shell output
# opens with a random `Chunk ID` and the `Wall time` the command took, so no two of its results
# were ever equal. A value after a label (the label is kept, the value compared as `#`):
# - Copilot CLI numbers its shell sessions, `<shellId: 15 completed with exit code 0>`, then 16,
#   17, ... (its loop of identical commands never looked like one);
# - Codex, a command still running: `Process running with session ID 3` (a new one each run);
# - qwen-code's `run_shell_command`: `Process Group PGID: 48213` (the process's id) and, after a
#   long command, `Note: this foreground command ran for 12s.`;
# - Claude Code's Bash in the background: `Command running in background with ID: bash_3`;
# - pi's bash, output cut short: `Full output: /tmp/pi-bash-<random>.log]`.
# No other number is masked, so a poll whose output counts something (or prints the time)
# still differs; an agent's own wording is matched, never a bare number or a timestamp.
_VOLATILE = re.compile(rb"^(?:Chunk ID: [0-9a-fA-F]+|Wall time: [0-9.]+ seconds)\r?$", re.M)
_VOLATILE_VALUE = re.compile(
    rb"(?P<label>\bshellId: |^Process running with session ID |^Process Group PGID: "
    rb"|^Note: this foreground command ran for |\bCommand running in background with ID: "
    rb"|\bFull output: )[^\s\]>]+",
    re.M,
)


def _label(match: re.Match[bytes]) -> bytes:
    return match.group("label") + b"#"


def _comparable(text: str) -> bytes:
    """A result's text without what changes on every run (see `_VOLATILE`)."""
    data = text.encode("utf-8", "surrogatepass")
    return _VOLATILE_VALUE.sub(_label, _VOLATILE.sub(b"", data))


def _comparable_parts(content: list[Any]) -> list[Any]:
    """A list of parts (Anthropic, Responses, Chat) with each text part's text compared as
    `_comparable` says; other parts as they are."""
    return [
        {**part, "text": _comparable(part["text"]).decode("utf-8", "surrogatepass")}
        if isinstance(part, dict) and isinstance(part.get("text"), str)
        else part
        for part in content
    ]


def result_digest(content: Any) -> str:
    """A result's content, compared by digest: a string as its text (without what
    `_VOLATILE` and `_VOLATILE_VALUE` name), anything else as its canonical JSON (keys
    sorted), its text parts compared the same way."""
    if isinstance(content, str):
        data = _comparable(content)
    else:
        if isinstance(content, list):
            content = _comparable_parts(content)
        try:
            data = orjson.dumps(content, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # content that is not JSON (an integer past 64 bits, say)
            data = repr(content).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _round(calls: Sequence[RoundCall]) -> tuple[frozenset[Fingerprint], frozenset[Any]] | None:
    """A round's calls and results, or None when it cannot be part of a run (no call, or a
    call without its result)."""
    if not calls:
        return None
    keys = set()
    results = set()
    for call in calls:
        if call.result is UNANSWERED:
            return None
        key = fingerprint(call.name, call.arguments)
        keys.add(key)
        results.add((key, result_digest(call.result)))
    return frozenset(keys), frozenset(results)


def repeat_run(rounds: Sequence[Sequence[RoundCall]]) -> RepeatRun | None:
    """The run at the end of `rounds` (the turns since the last user input, in order), or
    None when it is shorter than `NOTE_AT`."""
    if len(rounds) < NOTE_AT:
        return None
    last = _round(rounds[-1])
    if last is None:
        return None
    count = 1
    for earlier in reversed(rounds[:-1]):
        if _round(earlier) != last:
            break
        count += 1
    if count < NOTE_AT:
        return None
    names = tuple(sorted({name for name, _ in last[0]}))
    return RepeatRun(count, last[0], names)


def is_exempt(names: Sequence[str], patterns: Sequence[str]) -> bool:
    """Is any of the run's tools one that waits or polls (SPEC §10)? Case-insensitive."""
    return any(fnmatchcase(name.lower(), p.lower()) for name in names for p in patterns)


def guarded_run(run: RepeatRun | None, mode: str, exempt: Sequence[str]) -> RepeatRun | None:
    """The run the route acts on: none when the guard is off or a tool is exempt."""
    if run is None or mode == "off" or is_exempt(run.names, exempt):
        return None
    return run


def blocks(run: RepeatRun | None, mode: str) -> bool:
    """Does the route answer a further identical call itself (SPEC §10)?"""
    return run is not None and mode == "on" and run.count >= BLOCK_AT


def note_text(run: RepeatRun) -> str:
    names = ", ".join(f'"{name}"' for name in run.names)
    return REPEAT_NOTE.format(names=names, count=run.count)


def with_note(content: Any, note: str) -> Any:
    """A tool result's content with the note appended in the content's own shape: text gets
    a paragraph, a list of parts gets a text part (Chat `{"type":"text"}`, Anthropic
    `{"type":"text"}`, Responses `{"type":"input_text"}`, as its first part's kind says)."""
    if isinstance(content, str):
        return f"{content}\n\n{note}" if content else note
    if isinstance(content, list):
        first = content[0] if content and isinstance(content[0], dict) else {}
        kind = "input_text" if first.get("type") in ("input_text", "output_text") else "text"
        return [*content, {"type": kind, "text": note}]
    if content is None:
        return note
    return content  # a shape the proxy does not know: left as it came


__all__ = [
    "BLOCK_AT",
    "DEFAULT_EXEMPT",
    "MODES",
    "NOTE_AT",
    "REPEAT_ANSWER",
    "REPEAT_NOTE",
    "UNANSWERED",
    "RepeatRun",
    "RoundCall",
    "blocks",
    "guarded_run",
    "is_exempt",
    "note_text",
    "repeat_run",
    "result_digest",
    "with_note",
]
