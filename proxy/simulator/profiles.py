"""How each simulated upstream misbehaves, as data, and the scripted agent model they share.

A `Profile` is a flat description of one provider's quirks (id shape, delta shape, argument
encoding, finishing, replays, transport faults). Every profile runs the same scripted "agent
model" (`plan_reply`): it reads the request's history and answers with one tool-call round
after another, then a final text, so a real agent loop can run against it. The shaping code
below only looks at profile fields, never at profile names: a new quirk is a new field, and a
new provider is a new row in `PROFILES`. Where each quirk was seen: the project's QUIRKS.md.
"""

from __future__ import annotations

import contextlib
import functools
import random
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType
from typing import Any

import orjson

from proxy.simulator.providers import Provider

JSON = dict[str, Any]


class IdStyle(Enum):
    """Templates: {i} counts calls per response, {k} across the conversation's tool calls."""

    OPENAI = "call_<24 random base62>"
    KIMI_RESPONSE = "functions.{name}:{i}"
    KIMI_HISTORY = "functions.{name}:{k}"
    NAME_INDEX = "{name}_{i}"
    CALL_INDEX = "call_{i}"
    BARE = "{i}"
    INT = "<the number i>"
    EMPTY = ""
    MISSING = "<no id key>"


class IndexStyle(Enum):
    PER_CALL = "per-call"  # 0, 1, ... as OpenAI does
    ABSENT = "absent"  # no index key
    ZERO = "zero"  # every call at index 0


class LaterId(Enum):  # what a call's deltas after the first carry as `id`
    NONE = "none"
    SAME = "same"
    NULL_STRING = "null-string"
    FRESH = "fresh"  # a new random id on every delta


class ReplayMode(Enum):
    NONE = "none"
    ONCE = "once"  # round 2 re-emits round 1's call, exactly once per conversation
    LOOP = "loop"  # every turn after round 1 re-emits the latest call, forever
    MIXED = "mixed"  # round 2 re-emits round 1's call next to one fresh call
    # the latest call again, every turn, until it has been made `polls` times in a row; then
    # the model moves on (a model waiting for a job: each poll's result is news to it)
    POLL = "poll"


class ReplayId(Enum):  # the id a replayed call comes back under
    HISTORY = "history"  # as the incoming history spells it (the upstream id the proxy sent)
    # minted afresh by a counter that restarts every response (Moonshot's hosted API):
    # `functions.{name}:0` although the history said `functions.{name}:3`
    RESTARTED = "restarted"
    # a new random id every time, never one the history holds: not a replay by SPEC §5's
    # rules, only the same call (SPEC §10's repeat guard is what can see it)
    FRESH = "fresh"


class Fault(Enum):
    RATE_LIMIT = "429"
    SERVER_ERROR = "500"
    RESET = "reset"
    STALL = "stall"
    HANG = "hang"
    GARBAGE = "garbage"
    GARBAGE_IN_CALL = "garbage-in-call"  # a truncated event between a call's argument deltas
    HUGE = "huge"
    DRIP = "drip"
    CRLF = "crlf"


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    name: str
    text_only: bool = False  # no tool rounds: content in `chunks` pieces (benchmarks)
    id_style: IdStyle = IdStyle.OPENAI
    calls_per_round: int = 1
    duplicate_call: bool = False  # the second call copies the first's id, name and arguments
    index: IndexStyle = IndexStyle.PER_CALL
    whole_call: bool = False  # the arguments in the first delta instead of fragments
    later_id: LaterId = LaterId.NONE
    repeat_name_type: bool = False  # `type` and `function.name` on every delta
    omit_type: bool = False  # no `type` on any delta (Mistral on Azure, DeepInfra)
    args_as_object: bool = False
    final_flush: bool = False  # the complete arguments once more after the fragments
    tool_finish: str = "tool_calls"
    terminate: bool = True  # send finish_reason and [DONE] at all
    block_stop: bool = True  # Anthropic Messages: close each content block (translators forget)
    preamble: tuple[str, ...] = ("Let me ", "run ", "that.")
    obfuscation: bool = False
    # Responses: `.done` events (arguments, text, and a call's output_item.done) and item ids.
    done_events: bool = True
    item_ids: bool = True
    loop_preamble: bool = False  # a looping model still writes its preamble before the call
    replay: ReplayMode = ReplayMode.NONE
    replay_id: ReplayId = ReplayId.HISTORY
    # The replay follows this many tool rounds and re-emits the latest call: after round 1 a
    # restarted counter would give the replay the id the history already has (`:0`). Also an
    # option, so a scripted task (`SCRIPT_PREFIX`) can put the replayed call in any round.
    replay_after: int = 1
    polls: int = 6  # ReplayMode.POLL: how often the polled call is made in all
    kimi_history_check: bool = False  # leak raw markup when history ids are not Kimi's own
    leak: str | None = None  # a server with its tool parser off: calls arrive as this markup
    fault: Fault | None = None
    # Options, settable per request as `model+key=value` (see `profile_for_model`).
    rounds: int = 3
    chunks: int = 200
    delay_ms: float = 0.0
    stall_s: float = 30.0
    kb: int = 1024
    # A server of Chat Completions only (most open-model servers): its `/messages` and
    # `/responses` answer 404, as such servers do (SPEC §9's bridges serve those clients).
    chat_only: bool = False
    # A thinking model: this text as `reasoning_content` deltas before the content, and (when
    # `reasoning_required`) a 400 for a history whose tool-call turns lost it, as Kimi K2
    # thinking and DeepSeek's reasoner answer.
    reasoning: str = ""
    reasoning_required: bool = False
    # 1: refuse, as OpenAI does, a history whose calls are not each answered by the `tool`
    # messages right after their assistant message, or whose tool message answers no call of
    # the message before it (SPEC §11: the proxy repairs such histories).
    strict: int = 0
    # A provider family's strict API (SPEC §11): refuse what that provider refuses, in its
    # words (`proxy.simulator.providers`).
    provider: Provider = Provider.NONE


OPTIONS = (
    "rounds",
    "chunks",
    "delay_ms",
    "stall_s",
    "kb",
    "replay_after",
    "polls",
    "strict",
    # Enum options, by value: a profile's other quirks with replays added
    # (`kimi-chat-only+replay=once`: a Chat-only thinking Kimi that replays, SPEC §9's bridges).
    "replay",
    "replay_id",
    "provider",
)
LEAK_FORMATS = (
    "kimi",
    "hermes",
    "qwen3-coder",
    "deepseek",
    "llama",
    "mistral",
    "json",
    "llama4",
    "llama4-pythonic",
    "lmstudio",
    "glm",
    "minimax",
    "harmony",
    "deepseek-dsml",
    "functionary",
    "seed-oss",
    "mistral-v11",
    "pythonic",
    "phi4-mini",
    "xlam",
    "granite",
    "internlm",
    "jamba",
    "nemotron",
    "lfm2",
    "apertus",
    "cohere",
    "olmo3",
    "functiongemma",
    "longcat",
)
# Formats that are the entire message: no text may come before or after them.
WHOLE_MESSAGE_LEAKS = frozenset({"json", "pythonic", "phi4-mini"})

_ALL = (
    Profile(name="reference", obfuscation=True),
    Profile(name="kimi", id_style=IdStyle.KIMI_RESPONSE),
    Profile(name="kimi-vllm", id_style=IdStyle.KIMI_HISTORY, kimi_history_check=True),
    Profile(name="name-index", id_style=IdStyle.NAME_INDEX, calls_per_round=2),
    Profile(name="call-index", id_style=IdStyle.CALL_INDEX),
    Profile(
        name="repeat-fields",
        id_style=IdStyle.CALL_INDEX,
        later_id=LaterId.SAME,
        repeat_name_type=True,
    ),
    Profile(
        name="no-index",
        id_style=IdStyle.CALL_INDEX,
        index=IndexStyle.ABSENT,
        whole_call=True,
        tool_finish="stop",
        preamble=(),
    ),
    Profile(name="empty-id", id_style=IdStyle.EMPTY),
    # Missing index and missing type together, as several relays send them.
    Profile(
        name="missing-type",
        id_style=IdStyle.OPENAI,
        index=IndexStyle.ABSENT,
        omit_type=True,
    ),
    Profile(
        name="missing-id",
        id_style=IdStyle.MISSING,
        whole_call=True,
        args_as_object=True,
        preamble=(),
    ),
    Profile(
        name="index0-parallel",
        id_style=IdStyle.BARE,
        calls_per_round=2,
        index=IndexStyle.ZERO,
        later_id=LaterId.SAME,
        preamble=(),
    ),
    Profile(name="id-every-delta", later_id=LaterId.FRESH),
    Profile(name="null-id", id_style=IdStyle.CALL_INDEX, later_id=LaterId.NULL_STRING),
    Profile(name="int-id", id_style=IdStyle.INT, calls_per_round=2),
    Profile(name="final-flush", final_flush=True),
    Profile(name="no-finish", terminate=False),
    Profile(name="no-block-stop", block_stop=False),
    Profile(name="replay-once", id_style=IdStyle.NAME_INDEX, replay=ReplayMode.ONCE),
    Profile(name="replay-loop", id_style=IdStyle.NAME_INDEX, replay=ReplayMode.LOOP),
    Profile(name="replay-mixed", id_style=IdStyle.NAME_INDEX, replay=ReplayMode.MIXED),
    # The same replays under an id from a counter that restarts every response.
    *(
        Profile(
            name=f"replay-{mode.value}-restarted",
            id_style=IdStyle.NAME_INDEX,
            replay=mode,
            replay_id=ReplayId.RESTARTED,
            replay_after=2,
        )
        for mode in (ReplayMode.ONCE, ReplayMode.LOOP)
    ),
    # The same call under a fresh id every turn, forever (a model that lost track), and the
    # same call made `polls` times by a model that waits for something, then moves on.
    Profile(name="repeat-forever", replay=ReplayMode.LOOP, replay_id=ReplayId.FRESH),
    Profile(name="poll-until-done", replay=ReplayMode.POLL, replay_id=ReplayId.FRESH),
    Profile(name="dup-in-response", id_style=IdStyle.NAME_INDEX, duplicate_call=True),
    # Responses servers that leave out item ids, or every `.done` event and the completion.
    Profile(name="no-item-ids", id_style=IdStyle.KIMI_RESPONSE, item_ids=False),
    Profile(name="no-done-events", id_style=IdStyle.KIMI_RESPONSE, done_events=False),
    # A loop that shows text first: the breaker can then only act inside the stream.
    Profile(
        name="replay-loop-chatty",
        id_style=IdStyle.NAME_INDEX,
        replay=ReplayMode.LOOP,
        loop_preamble=True,
    ),
    # Tool parser off: the calls arrive inside `content` as each model family's markup.
    *(Profile(name=f"leak-{fmt}", leak=fmt) for fmt in LEAK_FORMATS),
    # Kimi served over Chat Completions alone: ids from a counter that restarts every response,
    # its history ids checked, its reasoning required back on tool-call turns.
    Profile(
        name="kimi-chat-only",
        id_style=IdStyle.KIMI_RESPONSE,
        kimi_history_check=True,
        chat_only=True,
        reasoning="The user wants a command run; I will call the tool.",
        reasoning_required=True,
    ),
    Profile(name="fast", text_only=True),
    Profile(name="paced", text_only=True, chunks=64, delay_ms=20.0),
    Profile(name="fault-429", fault=Fault.RATE_LIMIT),
    Profile(name="fault-500", fault=Fault.SERVER_ERROR),
    Profile(name="fault-reset", fault=Fault.RESET),
    Profile(name="fault-stall", fault=Fault.STALL),
    Profile(name="fault-hang", fault=Fault.HANG),
    Profile(name="fault-garbage", fault=Fault.GARBAGE),
    Profile(name="fault-garbage-in-call", fault=Fault.GARBAGE_IN_CALL),
    Profile(name="fault-huge", text_only=True, fault=Fault.HUGE, chunks=1),
    # Non-ASCII text, so dripping one byte at a time also splits UTF-8 characters.
    Profile(name="fault-drip", fault=Fault.DRIP, preamble=("Let me run ", "that… ✓")),
    Profile(name="fault-crlf", fault=Fault.CRLF),
)
PROFILES: Mapping[str, Profile] = MappingProxyType({p.name: p for p in _ALL})

DEFAULT_PROFILE = "kimi"


def profile_for_model(model: str) -> Profile:
    """The profile a request's `model` selects, with its `+key=value` options applied.

    `reference+rounds=5` is the reference profile with 5 rounds; `kimi-k2/replay-once` is
    replay-once (the last `/` segment may name the profile, so a model name can also contain
    "kimi"); any other name is the Kimi-like demo default. `kimi-chat-only+replay=loop+
    replay_id=restarted` adds a profile's replays to another's quirks. Raises ValueError on a
    malformed or unknown option, so a typo in a test fails loudly instead of running the defaults.
    """
    base, *raw_options = model.split("+")
    key = base.strip().lower()
    profile = PROFILES.get(key) or PROFILES.get(key.rsplit("/", 1)[-1]) or PROFILES[DEFAULT_PROFILE]
    options: dict[str, Any] = {}  # Any: `replace` checks each field's type, not a union
    for raw in raw_options:
        name, value = _option(profile, raw)
        options[name] = value
    profile = replace(profile, **options) if options else profile
    # A proxy serving a Kimi model translates history ids to functions.{name}:{k}; replaying
    # the upstream's own shape keeps the replay recognisable behind such a proxy. A fresh-id
    # profile keeps its random ids: a Kimi-shaped id could be one the history holds. After the
    # options, since `replay` and `replay_id` may be among them.
    fresh = profile.replay_id is ReplayId.FRESH
    if profile.replay is not ReplayMode.NONE and not fresh and "kimi" in model.lower():
        restarted = profile.replay_id is ReplayId.RESTARTED
        style = IdStyle.KIMI_RESPONSE if restarted else IdStyle.KIMI_HISTORY
        profile = replace(profile, id_style=style)
    return profile


def _option(profile: Profile, raw: str) -> tuple[str, Any]:
    """One `key=value` option as (field, value): a non-negative number, or an enum's value."""
    name, sep, value = (part.strip() for part in raw.partition("="))
    if not sep or name not in OPTIONS:
        raise ValueError(f"unknown simulator option {raw!r}; known: {', '.join(OPTIONS)}")
    kind = type(getattr(profile, name))
    if issubclass(kind, Enum):
        known = [member.value for member in kind]
        if value not in known:
            raise ValueError(f"simulator option {name}={value!r} is not one of {known}")
        return name, kind(value)
    try:
        number = kind(value)
    except ValueError:
        raise ValueError(f"simulator option {name}={value!r} is not a number") from None
    if number < 0:
        raise ValueError(f"simulator option {name} must not be negative")
    return name, number


# --- the scripted agent model ---------------------------------------------------------------

_BASE62 = string.ascii_letters + string.digits
_KIMI_ID = re.compile(r"functions\.[\w\-]+:(\d+)")
# A user message may script the model's rounds, one line per round: `step: <tool> <JSON args>`
# (`step: bash {"command": "ls"}`). Real agents offer their own tools with their own parameter
# names, so a test that drives one writes the calls it wants into the prompt; the script's
# length then replaces `rounds`.
SCRIPT_PREFIX = "step:"
_SCRIPT_LINE = re.compile(rf"^\s*{SCRIPT_PREFIX}\s*([\w\-.]+)\s+(\{{.*\}})\s*$", re.MULTILINE)


def random_id(prefix: str = "call_", length: int = 24) -> str:
    # Not `secrets`: ids must not collide, need not be unguessable, and benchmarks mint many.
    return prefix + "".join(random.choices(_BASE62, k=length))


@dataclass(frozen=True, slots=True)
class PlannedCall:
    name: str
    arguments: str
    call_id: str | int | None  # None: the call carries no id key


@dataclass(frozen=True, slots=True)
class Reply:
    content: tuple[str, ...]
    calls: tuple[PlannedCall, ...] = ()
    finish_reason: str | None = "stop"  # None: the profile sends no finish_reason
    kimi_history_ok: bool | None = None  # None: the profile does not check


@dataclass(frozen=True, slots=True)
class _History:
    calls: list[JSON]  # every tool call of every assistant message, in order
    call_rounds: int  # assistant messages with tool calls
    fresh_rounds: int  # ... that hold a call not seen before (replays and reruns do not count)
    trailing: int  # ... at the end with the latest one's calls (the latest one included)


def _tools(raw: object) -> list[tuple[str, str]]:
    """(name, argument name) per offered tool: the first required, else declared, property."""
    tools: list[tuple[str, str]] = []
    for entry in raw if isinstance(raw, list) else []:
        fn = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        params = fn.get("parameters")
        params = params if isinstance(params, dict) else {}
        required, props = params.get("required"), params.get("properties")
        names = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
        names += list(props) if isinstance(props, dict) else []
        tools.append((fn["name"], names[0] if names else "command"))
    return tools or [("run_shell_command", "command")]


def _name_and_arguments(call: JSON) -> tuple[str, str]:
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    name, args = fn.get("name"), fn.get("arguments")
    return str(name), args if isinstance(args, str) else orjson.dumps(args).decode()


def _fingerprint(call: JSON) -> tuple[str, str]:
    name, text = _name_and_arguments(call)
    with contextlib.suppress(orjson.JSONDecodeError):  # not JSON: compared as the raw string
        text = orjson.dumps(orjson.loads(text), option=orjson.OPT_SORT_KEYS).decode()
    return name, text


def _history(messages: list[Any]) -> _History:
    calls: list[JSON] = []
    seen: set[tuple[str, str]] = set()
    latest: set[tuple[str, str]] = set()
    call_rounds = fresh_rounds = trailing = 0
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        raw = message.get("tool_calls")
        round_calls = [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
        if round_calls:
            prints = {_fingerprint(c) for c in round_calls}
            call_rounds, fresh_rounds = call_rounds + 1, fresh_rounds + bool(prints - seen)
            trailing = trailing + 1 if prints == latest else 1
            seen |= prints
            latest = prints
            calls += round_calls
    return _History(calls, call_rounds, fresh_rounds, trailing)


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "\n".join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def _script(messages: list[Any]) -> list[tuple[str, str]]:
    """The (tool, arguments) steps the user messages script, in order; malformed lines are
    not steps."""
    steps: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        for name, raw in _SCRIPT_LINE.findall(_text_of(message.get("content"))):
            with contextlib.suppress(orjson.JSONDecodeError):
                steps.append((name, orjson.dumps(orjson.loads(raw)).decode()))
    return steps


def _kimi_history_ok(calls: list[JSON]) -> bool:
    for k, call in enumerate(calls):
        match = _KIMI_ID.fullmatch(call_id) if isinstance(call_id := call.get("id"), str) else None
        if match is None or int(match.group(1)) != k:
            return False
    return True


def _mint_id(style: IdStyle, name: str, position: int, history_calls: int) -> str | int | None:
    if style is IdStyle.OPENAI:
        return random_id()
    if style is IdStyle.INT:
        return position
    if style is IdStyle.MISSING:
        return None
    return str(style.value).format(name=name, i=position, k=history_calls + position)


def _replayed(profile: Profile, call: JSON, position: int, history_calls: int) -> PlannedCall:
    name, arguments = _name_and_arguments(call)
    if profile.replay_id is ReplayId.FRESH:
        # Random whatever the id style: a style's counter (`{name}_{i}`, Kimi's `:{k}`) can
        # give an id the history already holds, which would make the call a SPEC §5 replay.
        return PlannedCall(name, arguments, random_id())
    if profile.replay_id is ReplayId.RESTARTED:
        return PlannedCall(
            name, arguments, _mint_id(profile.id_style, name, position, history_calls)
        )
    # The id exactly as the incoming history spells it: behind a proxy that is the upstream id
    # the proxy translated to, which is what a real replaying upstream sends back.
    raw_id = call.get("id")
    return PlannedCall(name, arguments, raw_id if isinstance(raw_id, str | int) else None)


def _split_text(text: str, parts: int) -> tuple[str, ...]:
    size = max(1, -(-len(text) // parts))
    return tuple(text[i : i + size] for i in range(0, len(text), size))


@functools.lru_cache(maxsize=32)  # benchmarks ask for the same text thousands of times
def _text_body(profile: Profile) -> tuple[str, ...]:
    if profile.fault is Fault.HUGE:
        size = profile.kb * 1024
        return (("simulated payload " * (size // 18 + 1))[:size],)
    return tuple(f"word{i} " for i in range(max(1, profile.chunks)))


# A tool whose name says it waits or polls: the one a polling model polls when it is offered.
_WAITING_TOOL = re.compile(r"wait|sleep|poll|status|check", re.IGNORECASE)


def _waiting_first(tools: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The offered tools with the first one that waits or polls (if any) moved to the front."""
    waiting = next((tool for tool in tools if _WAITING_TOOL.search(tool[0])), None)
    return tools if waiting is None else [waiting, *(t for t in tools if t is not waiting)]


def _fresh_call(
    tools: list[tuple[str, str]], script: list[tuple[str, str]], rnd: int, i: int
) -> tuple[str, str]:
    """(name, arguments) of call `i` of round `rnd`: the script's step for the round's first
    call, else the offered tool (a second one, if any, for parallel calls) with an echo."""
    if i == 0 and rnd <= len(script):
        return script[rnd - 1]
    name, arg = tools[min(i, len(tools) - 1)]
    return name, orjson.dumps({arg: f"echo round-{rnd}-{i}"}).decode()


def plan_reply(profile: Profile, body: JSON) -> Reply:
    """What the scripted model answers to this request (ids already minted)."""
    if profile.text_only:
        return Reply(_text_body(profile))
    raw_messages = body.get("messages")
    messages = raw_messages if isinstance(raw_messages, list) else []
    history = _history(messages)
    kimi_ok = _kimi_history_ok(history.calls) if profile.kimi_history_check else None
    tools = _tools(body.get("tools"))
    done, rnd = len(history.calls), history.fresh_rounds + 1
    if profile.replay is ReplayMode.POLL and rnd == profile.replay_after:
        tools = _waiting_first(tools)  # the round that will be polled: a waiting tool if any
    script = _script(messages)
    rounds = len(script) if script else profile.rounds

    def fresh(i: int) -> PlannedCall:
        name, args = _fresh_call(tools, script, rnd, i)
        return PlannedCall(name, args, _mint_id(profile.id_style, name, i, done))

    calls = _replay_round(profile, history, fresh)
    if calls is None:
        if history.fresh_rounds >= rounds:
            return Reply(_split_text(f"All {rounds} rounds done.", 3), (), "stop", kimi_ok)
        if profile.duplicate_call:
            calls = (fresh(0),) * 2
        else:
            calls = tuple(fresh(i) for i in range(profile.calls_per_round))
    looping = profile.replay is ReplayMode.LOOP and history.call_rounds >= profile.replay_after
    return _reply_with(profile, calls, done, kimi_ok, looping)


def _replay_round(
    profile: Profile, history: _History, fresh: Callable[[int], PlannedCall]
) -> tuple[PlannedCall, ...] | None:
    """The round that re-emits the latest call when the profile's replay is due, else None:
    every turn after `replay_after` call rounds (LOOP), while the call after them has been
    made fewer than `polls` times in a row (POLL), or once, right after them."""
    mode, after = profile.replay, profile.replay_after
    if mode is ReplayMode.NONE or history.call_rounds < after:
        return None
    if mode is ReplayMode.POLL:
        # Only the call of round `after`: once the model has moved on it polls no more.
        polling = history.fresh_rounds == after and history.trailing < profile.polls
        if not polling:
            return None
    elif mode is not ReplayMode.LOOP and history.call_rounds != after:
        return None
    again = _replayed(profile, history.calls[-1], 0, len(history.calls))
    return (again, fresh(1)) if mode is ReplayMode.MIXED else (again,)


def _reply_with(
    profile: Profile,
    calls: tuple[PlannedCall, ...],
    done: int,
    kimi_ok: bool | None,
    looping: bool,
) -> Reply:
    """The reply carrying `calls` as this profile's server delivers them."""
    if kimi_ok is False:
        # A confused Kimi copies the foreign id shape, its parser fails and the call leaks.
        markup = "".join(
            f"<|tool_call_begin|>functions.{c.name}:{done + i}<|tool_call_argument_begin|>"
            f"{c.arguments}<|tool_call_end|>"
            for i, c in enumerate(calls)
        )
        markup = f"<|tool_calls_section_begin|>{markup}<|tool_calls_section_end|>"
        return Reply(profile.preamble + _split_text(markup, 4), (), "stop", False)
    if profile.leak is not None:
        return Reply(leak_content(profile.leak, profile.preamble, calls), (), "stop")
    finish = profile.tool_finish if profile.terminate else None
    # A model stuck in a loop sends the bare call: nothing reaches the client before the
    # proxy can tell it is a loop (SPEC §5: then an HTTP 422, which agents do not retry).
    quiet = looping and not profile.loop_preamble
    return Reply(() if quiet else profile.preamble, calls, finish, kimi_ok)


def leak_content(
    fmt: str, preamble: tuple[str, ...], calls: tuple[PlannedCall, ...]
) -> tuple[str, ...]:
    """A reply's content pieces when its calls leak as `fmt` markup: small pieces, so markers
    are split across chunks (and UTF-8 tokens across bytes), after the preamble unless the
    format must be the whole message."""
    markup = _split_text(leak_markup(fmt, calls), 9)
    return markup if fmt in WHOLE_MESSAGE_LEAKS else preamble + markup


def leak_markup(fmt: str, calls: tuple[PlannedCall, ...]) -> str:
    """The text a model writes for `calls` when its server does not parse tool calls."""
    return _LEAKS[fmt](calls)


def _leak_kimi(calls: tuple[PlannedCall, ...]) -> str:
    inner = "".join(
        f"<|tool_call_begin|>functions.{c.name}:{i}<|tool_call_argument_begin|>"
        f"{c.arguments}<|tool_call_end|>"
        for i, c in enumerate(calls)
    )
    return f"<|tool_calls_section_begin|>{inner}<|tool_calls_section_end|>"


def _call_object(call: PlannedCall, key: str = "arguments") -> str:
    """`{"name": ..., "arguments": {...}}` (or `"parameters"`), as models write a call."""
    return f'{{"name": "{call.name}", "{key}": {call.arguments}}}'


def _leak_hermes(calls: tuple[PlannedCall, ...]) -> str:
    return "".join(f"<tool_call>\n{_call_object(c)}\n</tool_call>" for c in calls)


def _leak_qwen3_coder(calls: tuple[PlannedCall, ...]) -> str:
    out = []
    for c in calls:
        params = "".join(
            f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in orjson.loads(c.arguments).items()
        )
        out.append(f"<tool_call>\n<function={c.name}>\n{params}</function>\n</tool_call>")
    return "".join(out)


def _leak_functionary(calls: tuple[PlannedCall, ...]) -> str:
    """Functionary v3.1 and Llama 3.1's custom format: the arguments as one JSON object."""
    return "".join(f"<function={c.name}>{c.arguments}</function>" for c in calls)


def _leak_seed_oss(calls: tuple[PlannedCall, ...]) -> str:
    def params(c: PlannedCall) -> str:
        return "".join(
            f"<parameter={k}>{v if isinstance(v, str) else orjson.dumps(v).decode()}</parameter>\n"
            for k, v in orjson.loads(c.arguments).items()
        )

    return "".join(
        f"<seed:tool_call>\n<function={c.name}>\n{params(c)}</function>\n</seed:tool_call>"
        for c in calls
    )


def _leak_deepseek(calls: tuple[PlannedCall, ...]) -> str:
    bar, sp = "\uff5c", "\u2581"
    inner = "".join(
        f"<{bar}tool{sp}call{sp}begin{bar}>{c.name}<{bar}tool{sp}sep{bar}>{c.arguments}"
        f"<{bar}tool{sp}call{sp}end{bar}>"
        for c in calls
    )
    return f"<{bar}tool{sp}calls{sp}begin{bar}>{inner}<{bar}tool{sp}calls{sp}end{bar}>"


def _leak_llama(calls: tuple[PlannedCall, ...]) -> str:
    return "<|python_tag|>" + _call_object(calls[0], "parameters")


def _leak_mistral(calls: tuple[PlannedCall, ...]) -> str:
    return f"[TOOL_CALLS][{', '.join(_call_object(c) for c in calls)}]"


def _leak_json(calls: tuple[PlannedCall, ...]) -> str:
    """The whole message is the call (Llama 3.x JSON tools, Hermes-2-Pro on some hosts)."""
    if len(calls) == 1:
        return _call_object(calls[0], "parameters")
    return f"[{', '.join(_call_object(c) for c in calls)}]"


def _leak_llama4(calls: tuple[PlannedCall, ...]) -> str:
    items = ", ".join(_call_object(c, "parameters") for c in calls)
    body = items if len(calls) == 1 else f"[{items}]"
    return f"<|python_start|>{body}<|python_end|>"


def _leak_llama4_pythonic(calls: tuple[PlannedCall, ...]) -> str:
    def call(c: PlannedCall) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in orjson.loads(c.arguments).items())
        return f"{c.name}({args})"

    return f"<|python_start|>[{', '.join(call(c) for c in calls)}]<|python_end|>"


def _leak_lmstudio(calls: tuple[PlannedCall, ...]) -> str:
    return "".join(f"[TOOL_REQUEST]{_call_object(c)}[END_TOOL_REQUEST]" for c in calls)


def _leak_glm(calls: tuple[PlannedCall, ...]) -> str:
    def pairs(c: PlannedCall) -> str:
        return "".join(
            f"<arg_key>{k}</arg_key>\n<arg_value>"
            f"{v if isinstance(v, str) else orjson.dumps(v).decode()}</arg_value>\n"
            for k, v in orjson.loads(c.arguments).items()
        )

    return "".join(f"<tool_call>{c.name}\n{pairs(c)}</tool_call>" for c in calls)


def _invoke(calls: tuple[PlannedCall, ...], tag: str, string_attr: bool) -> str:
    out = []
    for c in calls:
        params = []
        for k, v in orjson.loads(c.arguments).items():
            is_str = isinstance(v, str)
            attr = f' string="{"true" if is_str else "false"}"' if string_attr else ""
            text = v if is_str else orjson.dumps(v).decode()
            params.append(f'<{tag}parameter name="{k}"{attr}>{text}</{tag}parameter>\n')
        out.append(f'<{tag}invoke name="{c.name}">\n{"".join(params)}</{tag}invoke>\n')
    return "".join(out)


def _leak_minimax(calls: tuple[PlannedCall, ...]) -> str:
    return f"<minimax:tool_call>\n{_invoke(calls, '', False)}</minimax:tool_call>"


def _leak_deepseek_dsml(calls: tuple[PlannedCall, ...]) -> str:
    dsml = "\uff5cDSML\uff5c"
    return f"<{dsml}function_calls>\n{_invoke(calls, dsml, True)}</{dsml}function_calls>"


def _leak_harmony(calls: tuple[PlannedCall, ...]) -> str:
    """gpt-oss with the server's harmony parser off: one commentary message per call."""
    return "<|start|>assistant".join(
        f"<|channel|>commentary to=functions.{c.name} <|constrain|>json<|message|>"
        f"{c.arguments}<|call|>"
        for c in calls
    )


def _leak_mistral_v11(calls: tuple[PlannedCall, ...]) -> str:
    return "".join(f"[TOOL_CALLS]{c.name}{c.arguments}" for c in calls)


def _python_call(c: PlannedCall) -> str:
    return f"{c.name}({', '.join(f'{k}={v!r}' for k, v in orjson.loads(c.arguments).items())})"


def _leak_pythonic(calls: tuple[PlannedCall, ...]) -> str:
    """The whole message is a Python call list (Llama 3.2, ToolACE)."""
    return f"[{', '.join(_python_call(c) for c in calls)}]"


def _call_list(calls: tuple[PlannedCall, ...]) -> str:
    return f"[{', '.join(_call_object(c) for c in calls)}]"


def _leak_phi4_mini(calls: tuple[PlannedCall, ...]) -> str:
    return "functools" + _call_list(calls)


def _leak_xlam(calls: tuple[PlannedCall, ...]) -> str:
    return f"<tool_call>{_call_list(calls)}</tool_call>"


def _leak_granite(calls: tuple[PlannedCall, ...]) -> str:
    return "<|tool_call|>" + _call_list(calls)


def _leak_internlm(calls: tuple[PlannedCall, ...]) -> str:
    return "".join(
        f"<|action_start|><|plugin|>\n{_call_object(c, 'parameters')}<|action_end|>" for c in calls
    )


def _leak_jamba(calls: tuple[PlannedCall, ...]) -> str:
    return f"<tool_calls>{_call_list(calls)}</tool_calls>"


def _leak_nemotron(calls: tuple[PlannedCall, ...]) -> str:
    return f"<TOOLCALL>{_call_list(calls)}</TOOLCALL>"


def _leak_lfm2(calls: tuple[PlannedCall, ...]) -> str:
    return f"<|tool_call_start|>{_leak_pythonic(calls)}<|tool_call_end|>"


def _leak_apertus(calls: tuple[PlannedCall, ...]) -> str:
    items = ", ".join(f'{{"{c.name}": {c.arguments}}}' for c in calls)
    return f"<|tools_prefix|>[{items}]<|tools_suffix|>"


def _leak_cohere(calls: tuple[PlannedCall, ...]) -> str:
    items = ", ".join(
        f'{{"tool_call_id": "{i}", "tool_name": "{c.name}", "parameters": {c.arguments}}}'
        for i, c in enumerate(calls)
    )
    return f"<|START_ACTION|>[{items}]<|END_ACTION|>"


def _leak_olmo3(calls: tuple[PlannedCall, ...]) -> str:
    return "<function_calls>" + "\n".join(_python_call(c) for c in calls) + "</function_calls>"


def _gemma_value(value: object) -> str:
    if isinstance(value, str):
        return f"<escape>{value}<escape>"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_gemma_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_gemma_value(v) for v in value) + "]"
    return orjson.dumps(value).decode()


def _leak_functiongemma(calls: tuple[PlannedCall, ...]) -> str:
    return "".join(
        f"<start_function_call>call:{c.name}{_gemma_value(orjson.loads(c.arguments))}"
        "<end_function_call>"
        for c in calls
    )


def _leak_longcat(calls: tuple[PlannedCall, ...]) -> str:
    return "".join(f"<longcat_tool_call>{_call_object(c)}</longcat_tool_call>" for c in calls)


_LEAKS: Mapping[str, Callable[[tuple[PlannedCall, ...]], str]] = MappingProxyType(
    {
        "kimi": _leak_kimi,
        "hermes": _leak_hermes,
        "qwen3-coder": _leak_qwen3_coder,
        "deepseek": _leak_deepseek,
        "llama": _leak_llama,
        "mistral": _leak_mistral,
        "json": _leak_json,
        "llama4": _leak_llama4,
        "llama4-pythonic": _leak_llama4_pythonic,
        "lmstudio": _leak_lmstudio,
        "glm": _leak_glm,
        "minimax": _leak_minimax,
        "harmony": _leak_harmony,
        "deepseek-dsml": _leak_deepseek_dsml,
        "functionary": _leak_functionary,
        "seed-oss": _leak_seed_oss,
        "mistral-v11": _leak_mistral_v11,
        "pythonic": _leak_pythonic,
        "phi4-mini": _leak_phi4_mini,
        "xlam": _leak_xlam,
        "granite": _leak_granite,
        "internlm": _leak_internlm,
        "jamba": _leak_jamba,
        "nemotron": _leak_nemotron,
        "lfm2": _leak_lfm2,
        "apertus": _leak_apertus,
        "cohere": _leak_cohere,
        "olmo3": _leak_olmo3,
        "functiongemma": _leak_functiongemma,
        "longcat": _leak_longcat,
    }
)


# --- shaping tool calls into deltas and messages ----------------------------------------------


def arguments_value(profile: Profile, call: PlannedCall) -> object:
    if profile.args_as_object:
        with contextlib.suppress(orjson.JSONDecodeError):
            return orjson.loads(call.arguments)
    return call.arguments


def tool_call_deltas(profile: Profile, calls: tuple[PlannedCall, ...]) -> list[JSON]:
    """The `delta` objects (one per chunk) that stream `calls` in the profile's shape."""
    deltas: list[JSON] = []
    for position, call in enumerate(calls):
        head, later = _call_keys(profile, position, call)
        first_args = arguments_value(profile, call) if profile.whole_call else ""
        head["function"] = {"name": call.name, "arguments": first_args}
        deltas.append({"tool_calls": [head]})
        deltas.extend(_fragment_deltas(profile, call, later))
    return deltas


def _call_keys(profile: Profile, position: int, call: PlannedCall) -> tuple[JSON, JSON]:
    """The keys besides `function` of a call's first delta and of its later ones."""
    head: JSON = {} if profile.index is IndexStyle.ABSENT else {"index": 0}
    if profile.index is IndexStyle.PER_CALL:
        head["index"] = position
    later: JSON = dict(head)
    if call.call_id is not None:
        head["id"] = call.call_id
    if profile.later_id is LaterId.SAME and call.call_id is not None:
        later["id"] = call.call_id
    elif profile.later_id is LaterId.NULL_STRING:
        later["id"] = "null"
    if not profile.omit_type:
        head["type"] = "function"
    if profile.repeat_name_type:
        later["type"] = "function"
    return head, later


def _fragment_deltas(profile: Profile, call: PlannedCall, later: JSON) -> list[JSON]:
    """The deltas after a call's first: its argument fragments, and a final flush."""
    # At least three fragments, cut through keys and values as real servers do.
    pieces = [] if profile.whole_call else list(_split_text(call.arguments, 4))
    if profile.final_flush:
        pieces.append(call.arguments)
    deltas: list[JSON] = []
    for piece in pieces:
        fn: JSON = {"name": call.name} if profile.repeat_name_type else {}
        delta = {**later, "function": {**fn, "arguments": piece}}
        if profile.later_id is LaterId.FRESH:
            delta["id"] = random_id()
        deltas.append({"tool_calls": [delta]})
    return deltas
