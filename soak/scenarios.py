"""What the soak sends and what the client must get back, per simulator profile.

Three kinds of work, each judged against an expectation computed without the proxy:
- agent sessions (quirk profiles and the faults that still carry tool rounds): an agent loop
  runs to the end; every turn's tool calls (names and arguments) must equal what the profile's
  scripted model yields for that turn (`proxy.simulator.profiles.plan_reply` on the history a
  correct proxy presents), ids must be unique over the session, and the final text must be the
  profile's. Replay profiles must end the same way with no call run twice; replay-loop must be
  stopped by the breaker.
- single requests to the fault profiles: the documented SPEC §6 answer, exactly.
- text streams, some dropped by the client mid-way (the proxy must cancel and go on).
Anything else is a mismatch, recorded with its kind and an example.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core.ids import kimi_id
from proxy.simulator.profiles import PROFILES, plan_reply, profile_for_model
from soak.http import Reply, request
from tests.reliability.invariants import parse_sse_output

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string"}},
                "required": [arg],
            },
        },
    }
    for name, arg in (("run_shell_command", "command"), ("read_file", "path"))
]
MAX_STEPS = 8
REQUEST_TIMEOUT_S = 60.0
STALL_S = 15  # stall/hang faults last this long; the proxy's read timeout is shorter

AGENT_PROFILES = [
    "kimi",
    "kimi-vllm",
    "name-index",
    "call-index",
    "repeat-fields",
    "no-index",
    "empty-id",
    "missing-id",
    "index0-parallel",
    "id-every-delta",
    "null-id",
    "int-id",
    "final-flush",
    "no-finish",
    "reference",
    "dup-in-response",
    "fault-garbage",
    "fault-drip",
    "fault-crlf",
]
REPLAY_PROFILES = ["replay-once", "replay-mixed"]
FAULTS = [
    "fault-429",
    "fault-500",
    "fault-reset",
    f"fault-stall+stall_s={STALL_S}",
    f"fault-hang+stall_s={STALL_S}",
    "fault-huge+kb=512",
]
TEXT = ["fast+chunks=50", "paced+chunks=30+delay_ms=20"]


@dataclass
class Outcome:
    requests: int = 0
    answers: dict[str, int] = field(default_factory=dict)  # documented answers, by kind
    mismatches: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)

    def answer(self, kind: str) -> None:
        self.answers[kind] = self.answers.get(kind, 0) + 1

    def mismatch(self, kind: str, detail: object) -> None:
        self.mismatches.append((kind, str(detail)[:400]))


def check_profiles() -> None:
    for model in [*AGENT_PROFILES, *REPLAY_PROFILES, "replay-loop", *FAULTS, *TEXT]:
        base = model.split("+")[0]
        if base not in PROFILES:
            raise SystemExit(f"soak: the simulator has no profile {base!r}")


def _calls_key(calls: list[tuple[str, str]]) -> list[tuple[str, Any]]:
    return [(name, _json_or_text(args)) for name, args in calls]


def _json_or_text(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def expected_turns(model: str) -> tuple[list[list[tuple[str, str]]], str]:
    """The calls of each turn and the final text a correct proxy presents for `model`.

    The history is the one the upstream sees behind the proxy (ids in Kimi's shape, so
    kimi-vllm's check passes); calls the proxy drops as in-response duplicates are dropped.
    """
    profile = profile_for_model(model)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Run the build steps."}]
    turns: list[list[tuple[str, str]]] = []
    ordinal = 0
    for _ in range(MAX_STEPS):
        reply = plan_reply(profile, {"messages": history, "tools": TOOLS})
        if not reply.calls:
            return turns, "".join(reply.content)
        calls: list[tuple[str, str]] = []
        for call in reply.calls:
            key = (
                call.name,
                orjson.dumps(_json_or_text(call.arguments), option=orjson.OPT_SORT_KEYS),
            )
            if key not in {
                (n, orjson.dumps(_json_or_text(a), option=orjson.OPT_SORT_KEYS)) for n, a in calls
            }:
                calls.append((call.name, call.arguments))
        turns.append(calls)
        tool_calls = []
        for name, args in calls:
            tool_calls.append(
                {
                    "id": kimi_id(name, ordinal),
                    "type": "function",
                    "function": {"name": name, "arguments": args},
                }
            )
            ordinal += 1
        history.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
        history += [
            {"role": "tool", "tool_call_id": c["id"], "content": "done"} for c in tool_calls
        ]
    return turns, ""


def _message_from_stream(body: bytes) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(assistant message, error) from a stream: strict framing, tolerant of non-JSON data."""
    content: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    finish = None
    error = None
    events = [e.data for e in parse_sse_output(body) if e.data is not None]
    done = events.count(b"[DONE]")
    for data in events:
        if data == b"[DONE]" or not data.startswith(b"{"):
            continue
        chunk = orjson.loads(data)
        if "error" in chunk:
            error = chunk["error"]
            continue
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                slot = calls.get(call["index"])
                if slot is None:
                    if not (call.get("id") and call.get("type") == "function"):
                        raise ValueError(f"a first delta without id/type: {call}")
                    slot = calls[call["index"]] = {"id": call["id"], "name": "", "arguments": ""}
                    slot["name"] = call["function"]["name"]
                elif set(call) != {"index", "function"}:
                    raise ValueError(f"a later delta repeats fields: {call}")
                slot["arguments"] += call["function"].get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    if error is None and (done != 1 or events[-1] != b"[DONE]"):
        raise ValueError("a stream that did not end with exactly one [DONE]")
    if error is not None and done:
        raise ValueError("[DONE] after an error event")
    if sorted(calls) != list(range(len(calls))):
        raise ValueError(f"tool indexes not dense: {sorted(calls)}")
    message = {
        "content": "".join(content),
        "tool_calls": [
            {"id": c["id"], "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(calls.items())
        ],
        "finish_reason": finish,
    }
    return message, error


async def _chat(port: int, body: dict[str, Any], outcome: Outcome, **kwargs: Any) -> Reply:
    outcome.requests += 1
    return await request(
        port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps(body),
        timeout=REQUEST_TIMEOUT_S,
        **kwargs,
    )


async def agent_session(port: int, model: str, stream: bool, outcome: Outcome) -> None:
    replay = model in REPLAY_PROFILES or model == "replay-loop"
    turns, final = ([], "") if replay else expected_turns(model)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Run the build steps."}]
    ids: list[str] = []
    executed: list[tuple[str, str]] = []
    for step in range(MAX_STEPS):
        body = {"model": model, "stream": stream, "messages": messages, "tools": TOOLS}
        reply = await _chat(port, body, outcome)
        where = f"{model} stream={stream} turn {step + 1}"
        if reply.error or not reply.complete:
            outcome.mismatch("client_transport", f"{where}: {reply.error or 'incomplete'}")
            return
        if model == "replay-loop" and step == 1:
            _expect_loop_detected(reply, stream, where, outcome)
            return
        if reply.status != 200:
            outcome.mismatch("status", f"{where}: {reply.status} {reply.body[:200]!r}")
            return
        try:
            if stream:
                message, error = _message_from_stream(reply.body)
            else:
                message, error = _message_from_json(reply.body)
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as exc:
            outcome.mismatch("malformed", f"{where}: {exc}")
            return
        if error is not None:
            outcome.mismatch("error_event", f"{where}: {error}")
            return
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
        if not calls:
            if replay:
                if message["content"] != "All 3 rounds done.":
                    outcome.mismatch("final_text", f"{where}: {message['content']!r}")
            elif message["content"] != final or step != len(turns):
                outcome.mismatch("final_text", f"{where}: {message['content']!r} vs {final!r}")
            outcome.answer("agent_session_ok")
            return
        if not replay and (step >= len(turns) or _calls_key(calls) != _calls_key(turns[step])):
            expected = turns[step] if step < len(turns) else "final text"
            outcome.mismatch("tool_calls", f"{where}: {calls} vs {expected}")
            return
        if message["finish_reason"] != "tool_calls":
            outcome.mismatch("finish_reason", f"{where}: {message['finish_reason']!r}")
            return
        messages.append(
            {
                "role": "assistant",
                "content": message["content"],
                "tool_calls": [{"type": "function", **c} for c in message["tool_calls"]],
            }
        )
        for call in message["tool_calls"]:
            ids.append(call["id"])
            executed.append((call["function"]["name"], call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "done"})
        if len(set(ids)) != len(ids):
            outcome.mismatch("duplicate_ids", f"{where}: {ids}")
            return
        if len(set(executed)) != len(executed):
            outcome.mismatch("call_run_twice", f"{where}: {executed}")
            return
    outcome.mismatch("no_end", f"{model} stream={stream}: no final text in {MAX_STEPS} turns")


def _message_from_json(body: bytes) -> tuple[dict[str, Any], dict[str, Any] | None]:
    parsed = orjson.loads(body)
    choice = parsed["choices"][0]
    message = choice["message"]
    calls = message.get("tool_calls") or []
    for call in calls:
        if not (call["id"] and call["type"] == "function"):
            raise ValueError(f"a call without id/type: {call}")
    return {
        "content": message.get("content") or "",
        "tool_calls": calls,
        "finish_reason": choice.get("finish_reason"),
    }, None


def _expect_loop_detected(reply: Reply, stream: bool, where: str, outcome: Outcome) -> None:
    try:
        if stream:
            _, error = _message_from_stream(reply.body)
        else:
            error = orjson.loads(reply.body).get("error") if reply.status == 422 else None
    except (ValueError, orjson.JSONDecodeError) as exc:
        outcome.mismatch("malformed", f"{where}: {exc}")
        return
    if error is None or error.get("code") != "tool_call_replay_loop":
        outcome.mismatch("breaker", f"{where}: {reply.status} {reply.body[-300:]!r}")
        return
    outcome.answer("loop_detected")


def _error_of(reply: Reply, stream: bool) -> dict[str, Any] | None:
    if stream and reply.status == 200:
        return _message_from_stream(reply.body)[1]
    try:
        error = orjson.loads(reply.body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return error if isinstance(error, dict) else None


async def fault_request(port: int, model: str, stream: bool, outcome: Outcome) -> None:
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "go"}]}
    reply = await _chat(port, body, outcome)
    where = f"{model} stream={stream}"
    if reply.error or not reply.complete:
        outcome.mismatch("client_transport", f"{where}: {reply.error or 'incomplete'}")
        return
    base = model.split("+")[0]
    try:
        error = _error_of(reply, stream)
    except ValueError as exc:
        outcome.mismatch("malformed", f"{where}: {exc}")
        return
    code = error.get("code") if error else None
    if base == "fault-429":
        ok = reply.status == 429 and reply.headers.get("retry-after") == "7"
        kind = "upstream_429"
    elif base == "fault-500":
        ok, kind = reply.status == 500, "upstream_500"
    elif base in ("fault-reset", "fault-stall"):
        ok = code == "upstream_stream_error" and reply.status == (200 if stream else 502)
        kind = "upstream_stream_error"
    elif base == "fault-hang":
        ok, kind = reply.status == 504 and code == "upstream_timeout", "upstream_timeout"
    else:  # fault-huge: delivered intact
        text = _text(reply, stream)
        expected = "".join(plan_reply(profile_for_model(model), body).content)
        ok, kind = text == expected, "huge_chunk_intact"
    if ok:
        outcome.answer(kind)
    else:
        outcome.mismatch(kind, f"{where}: {reply.status} {reply.body[-300:]!r}")


def _text(reply: Reply, stream: bool) -> str | None:
    if reply.status != 200:
        return None
    try:
        if stream:
            message, error = _message_from_stream(reply.body)
            return None if error else str(message["content"])
        return str(orjson.loads(reply.body)["choices"][0]["message"]["content"])
    except (ValueError, KeyError, orjson.JSONDecodeError):
        return None


async def text_request(port: int, model: str, stream: bool, drop: bool, outcome: Outcome) -> None:
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "go"}]}
    reply = await _chat(port, body, outcome, drop_after_first_body=drop)
    where = f"{model} stream={stream}"
    if drop:
        if reply.status == 200:
            outcome.answer("client_dropped_mid_stream")
        else:
            outcome.mismatch("status", f"{where}: {reply.status}")
        return
    if reply.error or not reply.complete:
        outcome.mismatch("client_transport", f"{where}: {reply.error or 'incomplete'}")
        return
    expected = "".join(plan_reply(profile_for_model(model), body).content)
    if _text(reply, stream) != expected:
        outcome.mismatch("text", f"{where}: {reply.body[-200:]!r}")
    else:
        outcome.answer("text_ok")


async def one_unit(port: int, rng: random.Random, outcome: Outcome) -> None:
    """One randomly chosen session or request."""
    roll = rng.random()
    stream = rng.random() < 0.8
    if roll < 0.55:
        await agent_session(port, rng.choice(AGENT_PROFILES), stream, outcome)
    elif roll < 0.65:
        model = rng.choice([*REPLAY_PROFILES, "replay-loop"])
        await agent_session(port, model, stream, outcome)
    elif roll < 0.85:
        await fault_request(port, rng.choice(FAULTS), stream, outcome)
    else:
        model = rng.choice(TEXT)
        drop = stream and model.startswith("paced") and rng.random() < 0.5
        await text_request(port, model, stream, drop, outcome)
