"""Streams the other tests already simulate, as cases for the differential check.

- Built with the core tests' own builders (tests/chat/helpers.py for Chat Completions,
  tests/anthropic/anthropic_wire.py, tests/responses/helpers.py): the shapes
  of QUIRKS.md those tests feed the cores, here sent over loopback through the real server.
- Captured from the built-in simulator (proxy/simulator) over HTTP, one stream and one
  non-streaming body per profile: what the end-to-end tests run agents against.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from tests.anthropic import anthropic_wire as aw
from tests.chat.helpers import (
    calls,
    chunk,
    finish,
    frag,
    header,
    role,
    sse,
    text,
    usage_chunk,
)
from tests.differential.corpus import RECORDED, Case
from tests.responses.helpers import Upstream, event

JSON = dict[str, Any]
ARGS = '{"command":"ls -la"}'
LS = {"command": "ls -la"}


def _case(name: str, body: bytes, source: str) -> Case:
    return Case(name, body, True, source)


# -- Chat Completions (tests/chat/helpers.py) -------------------------------------------------

CORE = "tests/chat/helpers.py"


def _chat_reference() -> bytes:
    """OpenAI's own shape: a role chunk, text, a call header then fragments, the finish in
    its own chunk, a usage chunk with `choices: []` (QUIRKS.md, "The reference shape")."""
    return sse(
        role(system_fingerprint="fp_1", service_tier="default"),
        text("Checking "),
        text("now."),
        calls(header(0, "call_Q2kz8uTlB0aLZ5Yw1mPq3rXs", "Bash")),
        calls(frag(0, '{"comm')),
        calls(frag(0, 'and":"ls -la"}')),
        calls(header(1, "call_Vf3Jc9wWQ0oT7yGm2nLk5bHd", "grep", '{"pattern":"x"}')),
        finish("tool_calls"),
        usage_chunk(12, 7),
    )


def chat_cases() -> list[Case]:
    kimi = [
        calls(header(0, "functions.Bash:0", "Bash", ARGS)),
        calls(header(1, "functions.Bash:0", "Bash", '{"command":"pwd"}')),
    ]
    built: dict[str, bytes] = {
        "core-reference": _chat_reference(),
        "core-text-only-usage": sse(
            role(), text("Hello"), text(" there."), finish("stop"), usage_chunk()
        ),
        "core-comments-and-extra-keys": sse(
            b": OPENROUTER PROCESSING",
            role(obfuscation="a1B2"),
            b": keep-alive",
            text("Hi", obfuscation="zz9", provider="relay"),
            finish("stop", service_tier="flex"),
        ),
        "core-empty-tool-calls-on-text": sse(
            role(), chunk({"content": "plain", "tool_calls": []}), finish("stop")
        ),
        "core-reasoning-and-logprobs": sse(
            chunk({"role": "assistant", "reasoning_content": "Let me think."}),
            chunk(
                {"content": "Yes"},
                logprobs={
                    "content": [
                        {"token": "Yes", "logprob": -0.1, "bytes": [89], "top_logprobs": []}
                    ]
                },
            ),
            finish("stop"),
        ),
        "core-refusal": sse(
            chunk({"role": "assistant", "content": None, "refusal": ""}),
            chunk({"refusal": "I can't help with that."}),
            finish("stop"),
        ),
        # a truncated event that kept its `event:` line: SDKs that dispatch a data-less
        # event (the openai SDKs do) must not be handed one
        "core-data-line-not-json-with-event-line": sse(
            role(),
            text("Hel"),
            b'event: completion\ndata: {"id":"chatcmpl-1","obj',
            text("lo"),
            finish("stop"),
        ),
        "core-two-choices-with-calls": sse(
            role(),
            role(choice=1),
            calls(header(0, "call_Choice0aaaaaaaaaaaaaaaaa", "Bash", ARGS)),
            calls(header(0, "functions.Bash:0", "Bash", '{"command":"pwd"}'), choice=1),
            finish("tool_calls"),
            finish("tool_calls", choice=1),
        ),
        "core-annotations-in-deltas": sse(
            role(),
            text("See example.org."),
            chunk(
                {
                    "annotations": [
                        {
                            "type": "url_citation",
                            "url_citation": {
                                "url": "https://example.org/",
                                "title": "Example",
                                "start_index": 4,
                                "end_index": 15,
                            },
                        }
                    ]
                }
            ),
            finish("stop"),
        ),
        "core-legacy-function-call": sse(
            role(),
            chunk({"function_call": {"name": "Bash", "arguments": ""}}),
            chunk({"function_call": {"arguments": ARGS}}),
            finish("function_call"),
        ),
        "core-kimi-ids-same-id-other-arguments": sse(role(), *kimi, finish("tool_calls")),
        "core-stop-after-tool-calls": sse(
            role(), calls(header(0, "call_abcDEF123", "Bash", ARGS)), finish("stop")
        ),
        "core-tool-calls-claimed-none-sent": sse(role(), text("done"), finish("tool_calls")),
        "core-no-finish-no-done": sse(
            role(), text("cut "), calls(header(0, "call_abcDEF123", "Bash", ARGS)), done=False
        ),
        "core-crlf-no-space": sse(
            role(),
            text("crlf"),
            calls(header(0, "call_abcDEF123", "Bash", ARGS)),
            finish("tool_calls"),
            eol="\r\n",
            space=False,
        ),
        "core-length-cut-off": sse(role(), text("The answer is"), finish("length"), usage_chunk()),
        "core-usage-glued-to-last-chunk": sse(
            role(),
            text("hi"),
            finish("stop", usage={"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}),
        ),
    }
    return [_case(name, body, CORE) for name, body in built.items()]


# -- Anthropic Messages (tests/anthropic/anthropic_wire.py) ------------------------------

WIRE = "tests/anthropic/anthropic_wire.py"
REDACTED = aw.ev(
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
    }
) + aw.ev({"type": "content_block_stop", "index": 1})
SERVER_TOOL = (
    aw.ev(
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {
                "type": "server_tool_use",
                "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
                "name": "web_search",
                "input": {},
            },
        }
    )
    + aw.ev(
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "x"}'},
        }
    )
    + aw.ev({"type": "content_block_stop", "index": 2})
)


def _message_of(message_start: bytes) -> JSON:
    message: JSON = orjson.loads(message_start[message_start.index(b"{") :])["message"]
    return message


def anthropic_cases() -> list[Case]:
    own = "toolu_01A09q90qw90lq917835lq9"
    built: dict[str, bytes] = {
        "wire-thinking-redacted-server-tool-unknown": aw.start()
        + aw.ev({"type": "ping"})
        + aw.thinking(0, "Hmm.", "EqQBCgIYAh==")
        + REDACTED
        + SERVER_TOOL
        + aw.ev({"type": "some_future_event", "payload": {"a": [1, 2]}})
        + aw.tool(3, own, "Bash", LS)
        + aw.end(),
        "wire-whole-input-in-block-start": aw.start()
        + aw.tool(0, own, "Bash", LS, whole=True, deltas=False)
        + aw.end(),
        "wire-whole-input-then-same-deltas": aw.start()
        + aw.tool(0, own, "Bash", LS, whole=True)
        + aw.end(),
        "wire-missing-block-stops": aw.start()
        + aw.text(0, "Let me ", "look.", stop=False)
        + aw.tool(1, own, "Bash", LS, stop=False)
        + aw.end(),
        "wire-end-turn-after-tool-use": aw.start()
        + aw.text(0, "Running it.")
        + aw.tool(1, own, "Bash", LS)
        + aw.end("end_turn"),
        "wire-tool-use-claimed-none-sent": aw.start() + aw.text(0, "Done.") + aw.end("tool_use"),
        "wire-max-tokens-kept": aw.start() + aw.text(0, "The list is long") + aw.end("max_tokens"),
        "wire-no-message-stop": aw.start() + aw.text(0, "hi") + aw.tool(1, own, "Bash", LS),
        "wire-message-start-carries-kimi-tool-use": aw.ev(
            {
                "type": "message_start",
                "message": {
                    **_message_of(aw.start()),
                    "content": [
                        {"type": "tool_use", "id": "functions.Bash:0", "name": "Bash", "input": LS}
                    ],
                    "stop_reason": "tool_use",
                    "usage": {"input_tokens": 10, "output_tokens": 12},
                },
            }
        )
        + aw.ev({"type": "message_stop"}),
        "wire-data-line-not-json": aw.start()
        + aw.text(0, "Hel")
        + b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"del\n\n'
        + aw.text(1, "lo.")
        + aw.end("end_turn"),
        "wire-server-tool-input-whole-in-block-start": aw.start()
        + aw.ev(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {
                    "type": "server_tool_use",
                    "id": "srvtoolu_01WholeInput9aBcDeFgHiJkLm",
                    "name": "web_search",
                    "input": {"query": "x"},
                },
            }
        )
        + aw.ev({"type": "content_block_stop", "index": 0})
        + aw.text(1, "Searching.")
        + aw.end("end_turn"),
        "wire-kimi-ids-same-id-other-input": aw.start()
        + aw.tool(0, "functions.Bash:0", "Bash", LS)
        + aw.tool(1, "functions.Bash:0", "Bash", {"command": "pwd"})
        + aw.end(),
    }
    return [_case(name, body, WIRE) for name, body in built.items()]


# -- Responses (tests/responses/helpers.py) ------------------------------------------

RESP = "tests/responses/helpers.py"
# tests/responses/test_stream.py's quirks whose stream the SDK itself can read
RESPONSES_QUIRKS: dict[str, JSON] = {
    "kimi-restarted-counter": dict(call_id="functions.bash:0"),
    "whole-arguments-in-added": dict(call_id="functions.bash:0", whole=True, deltas=False),
    "whole-arguments-then-repeating-deltas": dict(call_id="functions.bash:0", whole=True),
    "final-flush": dict(call_id="call_xyzABC987", flush=True),
    "no-arguments-done": dict(call_id="functions.bash:0", done=False),
    "empty-item-id": dict(call_id="functions.bash:0", item_id=""),
    "missing-call-id": dict(call_id=None),
    "empty-call-id": dict(call_id=""),
    "numeric-call-id": dict(call_id=0),
    "only-done-carries-arguments": dict(call_id="functions.bash:0", deltas=False),
}


def _builtin_and_unknown() -> bytes:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "encrypted_content": "gAAAA-opaque",
    }
    search = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "x"},
    }
    upstream = Upstream().created()
    for index, item in enumerate((reasoning, search)):
        upstream.raw(
            event("response.output_item.added", output_index=index, item=item, sequence_number=2)
        )
        upstream.raw(
            event("response.output_item.done", output_index=index, item=item, sequence_number=2)
        )
        upstream.index += 1
    upstream.raw(event("response.some_future_event", payload={"k": [1]}, sequence_number=2))
    return upstream.message("Found it.").call("call_abcDEF123", ARGS).completed().numbered()


def _custom_call(text: str, status: str = "in_progress") -> JSON:
    return {
        "type": "custom_tool_call",
        "id": "ctc_1",
        "call_id": "functions.apply_patch:0",
        "name": "apply_patch",
        "input": text,
        "status": status,
    }


def responses_cases() -> list[Case]:
    built: dict[str, bytes] = {
        "helpers-reference": Upstream()
        .created()
        .message("Let me ", "look.")
        .call("call_abcDEF123", ARGS)
        .completed()
        .numbered(),
        "helpers-reasoning-builtin-unknown": _builtin_and_unknown(),
    }
    namespaced = Upstream().created().call("call_NsA1b2C3d4E5f6G7h8I9j0K1", ARGS, name="spawn")
    namespaced.events = [
        e.replace(b'"name":"spawn"', b'"name":"spawn","namespace":"multi_agent_v1"')
        for e in namespaced.events
    ]
    built["helpers-call-with-namespace"] = namespaced.completed().numbered()
    custom = Upstream().created()
    for kind, fields in (
        ("response.output_item.added", {"item": _custom_call("")}),
        ("response.custom_tool_call_input.delta", {"item_id": "ctc_1", "delta": "*** Begin"}),
        ("response.custom_tool_call_input.done", {"item_id": "ctc_1", "input": "*** Begin"}),
        ("response.output_item.done", {"item": _custom_call("*** Begin", "completed")}),
    ):
        custom.raw(event(kind, output_index=0, sequence_number=3, **fields))
    built["helpers-custom-call-kimi-id"] = custom.completed().numbered()
    numbered = Upstream().created().message("Hel", "lo.").call("call_abcDEF123", ARGS).completed()
    body = numbered.numbered()
    cut = body.rindex(b"event: response.output_item.added")  # before the call
    truncated = (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_\n\n'
    )
    built["helpers-data-line-not-json"] = body[:cut] + truncated + body[cut:]
    for name, quirk in RESPONSES_QUIRKS.items():
        built[f"helpers-{name}"] = (
            Upstream().created().call(arguments=ARGS, **quirk).completed().numbered()
        )
    cases = [_case(name, body, RESP) for name, body in built.items()]
    return cases + _kimi_variants()


# Recorded Responses streams with their call ids turned into Kimi's restarting counter, which
# the proxy must rewrite: what it then rebuilds must still carry everything else as sent.
KIMI_VARIANTS = {
    "bug-completed-carries-newer-state": [b"call_Newer3Cd5Ef7Gh9Ij1Kl3Mn"],
    "bug-program-calls-stay-in-progress": [
        b"call_West1Ab3Cd5Ef7Gh9Ij1Kl",
        b"call_East2Bc4De6Fg8Hi0Jk2Lm",
    ],
}


def _kimi_variants() -> list[Case]:
    out = []
    for name, call_ids in KIMI_VARIANTS.items():
        path = RECORDED / "responses" / f"{name}.sse"
        body = path.read_bytes()
        for n, call_id in enumerate(call_ids):
            body = body.replace(call_id, f"functions.query_database:{n}".encode())
        source = f"{path.relative_to(RECORDED)} with Kimi call ids"
        out.append(Case(f"{name}-kimi-call-ids", body, True, source))
    return out


# -- the simulator's profiles, captured over HTTP ---------------------------------------------

SIM_TOOLS = ("Bash", "grep")


def _sim_request(surface: str, profile: str, stream: bool) -> tuple[str, JSON]:
    user = {"role": "user", "content": "Run the checks."}
    if surface == "chat":
        tools = [
            {"type": "function", "function": {"name": t, "parameters": {"type": "object"}}}
            for t in SIM_TOOLS
        ]
        body: JSON = {"model": profile, "messages": [user], "tools": tools}
        if stream:
            body["stream_options"] = {"include_usage": True}
        return "/v1/chat/completions", {**body, "stream": stream}
    if surface == "anthropic":
        body = {
            "model": profile.removesuffix("+thinking"),
            "max_tokens": 1024,
            "messages": [user],
            "tools": [{"name": t, "input_schema": {"type": "object"}} for t in SIM_TOOLS],
        }
        if profile.endswith("+thinking"):
            body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
        return "/v1/messages", {**body, "stream": stream}
    tools = [{"type": "function", "name": t, "parameters": {"type": "object"}} for t in SIM_TOOLS]
    return "/v1/responses", {"model": profile, "input": [user], "tools": tools, "stream": stream}


def capture(simulator_url: str, surface: str, profiles: list[str]) -> dict[str, Case]:
    """One stream and one non-streaming body per profile, as the simulator answers them."""
    out: dict[str, Case] = {}
    with httpx.Client(base_url=simulator_url, timeout=10) as client:
        for profile in profiles:
            for stream in (True, False):
                path, body = _sim_request(surface, profile, stream)
                answer = client.post(path, json=body)
                assert answer.status_code == 200, (profile, answer.status_code, answer.text[:200])
                name = f"sim-{profile}-{'stream' if stream else 'json'}"
                out[name] = Case(name, answer.content, stream, f"simulator profile {profile!r}")
    return out
