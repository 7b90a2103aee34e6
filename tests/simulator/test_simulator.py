"""The simulated provider: each profile's quirk, the scripted rounds, faults and the log.

Streams are read from a real uvicorn server on loopback (httpx.ASGITransport buffers whole
responses, so it cannot show incremental writes or disconnects); non-streaming requests go
through ASGITransport.
"""

from __future__ import annotations

import asyncio
import base64
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from proxy.config.load import SIMULATOR_MOUNT, Route, Settings
from proxy.server.app import create_app
from proxy.simulator import PROFILES, SimulatorLog, create_simulator_app, profile_for_model
from proxy.simulator.profiles import IdStyle

JSON = dict[str, Any]
Sim = tuple[httpx.AsyncClient, SimulatorLog]
USER = {"role": "user", "content": "run the checks"}
SHELL = {
    "type": "function",
    "function": {
        "name": "shell",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    },
}
READ = {"type": "function", "function": {"name": "read_file", "parameters": {"required": ["path"]}}}


@dataclass
class Server:
    url: str
    log: SimulatorLog


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    log = SimulatorLog()
    config = uvicorn.Config(
        create_simulator_app(log), host="127.0.0.1", port=0, log_level="warning"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.01)
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield Server(f"http://127.0.0.1:{port}", log)
    srv.should_exit = True
    thread.join(10)


@pytest.fixture
async def sim(server: Server) -> AsyncIterator[Sim]:
    server.log.clear()
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        yield client, server.log


@pytest.fixture
async def asgi() -> AsyncIterator[Sim]:
    log = SimulatorLog()
    transport = httpx.ASGITransport(app=create_simulator_app(log))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        yield client, log


async def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.01)


@dataclass
class Stream:
    raw: bytes
    chunks: list[JSON]
    done: bool

    @property
    def calls(self) -> list[JSON]:
        return [
            tc
            for c in self.chunks
            for ch in c["choices"]
            for tc in ch["delta"].get("tool_calls", [])
        ]

    @property
    def content(self) -> str:
        return "".join(ch["delta"].get("content") or "" for c in self.chunks for ch in c["choices"])

    @property
    def finishes(self) -> list[str]:
        return [
            ch["finish_reason"] for c in self.chunks for ch in c["choices"] if ch["finish_reason"]
        ]


def parse_sse(raw: bytes) -> Stream:
    chunks, done = [], False
    for event in re.split(rb"\r?\n\r?\n", raw):
        if not event.startswith(b"data:"):
            continue  # comments and blank tails
        data = event[5:].lstrip(b" ")
        if data == b"[DONE]":
            done = True
            continue
        try:
            chunks.append(orjson.loads(data))
        except orjson.JSONDecodeError:
            continue  # fault-garbage's junk lines
    return Stream(raw, chunks, done)


def request(model: str, messages: list[JSON] | None = None, **extra: Any) -> JSON:
    return {"model": model, "messages": messages or [USER], "stream": True, **extra}


async def stream(
    client: httpx.AsyncClient, model: str, messages: list[JSON] | None = None, **extra: Any
) -> Stream:
    response = await client.post("/v1/chat/completions", json=request(model, messages, **extra))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.content)


def answered(call_id: Any, args: str, name: str = "run_shell_command") -> list[JSON]:
    """One round of history: the assistant's call and the tool's answer."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "ok"},
    ]


def args_of(calls: list[JSON], index: int | None = None) -> str:
    """The arguments a client assembles for the call at `index` (all deltas when None)."""
    parts = (d["function"].get("arguments", "") for d in calls if index in (None, d.get("index")))
    return "".join(parts)


ROUND1 = '{"command":"echo round-1-0"}'
ROUND2 = '{"command":"echo round-2-0"}'


def test_profile_for_model_selection_and_options() -> None:
    assert profile_for_model("reference").name == "reference"
    for model in ("kimi-k2-instruct", "moonshot-v1-8k", "gpt-4o", ""):
        assert profile_for_model(model).name == "kimi"
    paced = profile_for_model("paced+chunks=64+delay_ms=20")
    assert (paced.name, paced.chunks, paced.delay_ms) == ("paced", 64, 20.0)
    assert profile_for_model("reference+rounds=5").rounds == 5
    assert profile_for_model("fault-stall+stall_s=0.5").stall_s == 0.5
    assert profile_for_model("replay-once").id_style is IdStyle.NAME_INDEX
    kimi_replay = profile_for_model("kimi-k2/replay-once")
    assert (kimi_replay.name, kimi_replay.id_style) == ("replay-once", IdStyle.KIMI_HISTORY)
    for bad in ("reference+nope=1", "reference+rounds", "reference+rounds=x"):
        with pytest.raises(ValueError):
            profile_for_model(bad)


async def test_reference_stream_has_the_openai_shape(sim: Sim) -> None:
    client, log = sim
    s = await stream(client, "reference", stream_options={"include_usage": True})
    first = s.chunks[0]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["object"] == "chat.completion.chunk" and first["model"] == "reference"
    assert first["id"].startswith("chatcmpl-") and first["system_fingerprint"]
    assert "obfuscation" in first  # an unknown key clients must tolerate
    assert s.content == "Let me run that."
    head, *rest = s.calls
    assert set(head) == {"index", "id", "type", "function"} and head["index"] == 0
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", head["id"])
    assert head["function"] == {"name": "run_shell_command", "arguments": ""}
    assert len(rest) >= 3 and all(set(d) == {"index", "function"} for d in rest)
    assert args_of(rest) == ROUND1
    finish, usage = s.chunks[-2:]
    assert finish["choices"] == [
        {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}
    ]
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == (
        usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"]
    )
    assert s.done and s.raw.endswith(b"data: [DONE]\n\n")
    await wait_for(lambda: log.completed_streams == 1)
    assert log.disconnects == 0


async def test_usage_chunk_only_when_asked(sim: Sim) -> None:
    s = await stream(sim[0], "reference")
    assert all(c["choices"] for c in s.chunks) and s.finishes == ["tool_calls"]


async def test_agent_loop_runs_three_rounds_then_final_text(sim: Sim) -> None:
    client, _ = sim
    messages: list[JSON] = [USER]
    seen_args = []
    for _ in range(10):
        s = await stream(client, "reference", messages, tools=[SHELL])
        if not s.calls:
            break
        head, *rest = s.calls
        args = args_of(rest)
        seen_args.append(orjson.loads(args))
        messages += answered(head["id"], args, head["function"]["name"])
    assert seen_args == [{"cmd": f"echo round-{r}-0"} for r in (1, 2, 3)]  # first declared property
    assert s.content == "All 3 rounds done." and len(s.chunks) >= 4 and s.finishes == ["stop"]


async def test_kimi_reuses_functions_name_0_every_turn(sim: Sim) -> None:
    client, _ = sim
    turn1 = await stream(client, "kimi-k2")
    turn2 = await stream(client, "kimi-k2", [USER, *answered("call_1_0_abcdef12", ROUND1)])
    assert turn1.calls[0]["id"] == turn2.calls[0]["id"] == "functions.run_shell_command:0"


async def test_kimi_vllm_counts_across_history_and_leaks_markup_on_foreign_ids(sim: Sim) -> None:
    client, log = sim
    history = [USER, *answered("functions.run_shell_command:0", ROUND1)]
    own = await stream(client, "kimi-vllm", history)
    assert own.calls[0]["id"] == "functions.run_shell_command:1" and own.finishes == ["tool_calls"]
    foreign = await stream(client, "kimi-vllm", [USER, *answered("call_abc", ROUND1)])
    assert foreign.calls == [] and foreign.finishes == ["stop"]
    leaked = "<|tool_calls_section_begin|><|tool_call_begin|>functions.run_shell_command:1"
    assert foreign.content.startswith("Let me run that." + leaked)
    assert foreign.content.endswith("<|tool_call_end|><|tool_calls_section_end|>")
    assert log.kimi_history_ok == [True, False]


def shape(calls: list[JSON]) -> list[tuple[Any, ...]]:
    """Per delta: index, id ("-" when absent), type, name and arguments as sent."""
    return [
        (d.get("index", "-"), d.get("id", "-"), d.get("type", "-"), *d["function"].values())
        for d in calls
    ]


NAME = "run_shell_command"
FRAGS = ['{"comma', 'nd":"ec', "ho roun", 'd-1-0"}']


def call(index: int, call_id: Any, later_id: Any = "-", rnd: str = "1-0") -> list[tuple[Any, ...]]:
    """The shape of one OpenAI-style call: a header delta, then bare argument fragments."""
    frags = [(index, later_id, "-", f.replace("1-0", rnd)) for f in FRAGS]
    return [(index, call_id, "function", NAME, ""), *frags]


# Exact delta shapes per profile: (model, what the stream's tool-call deltas must look like).
SHAPES: list[tuple[str, list[tuple[Any, ...]]]] = [
    ("call-index", call(0, "call_0")),
    ("repeat-fields", [(0, "call_0", "function", NAME, a) for a in ["", *FRAGS]]),
    ("no-index", [("-", "call_0", "function", NAME, ROUND1)]),
    ("empty-id", call(0, "")),
    ("missing-id", [(0, "-", "function", NAME, {"command": "echo round-1-0"})]),
    ("index0-parallel", call(0, "0", "0") + call(0, "1", "1", rnd="1-1")),
    ("null-id", call(0, "call_0", "null")),
    ("int-id", call(0, 0) + call(1, 1, rnd="1-1")),
    ("dup-in-response", call(0, f"{NAME}_0") + call(1, f"{NAME}_0")),
]


@pytest.mark.parametrize(("model", "expected"), SHAPES, ids=[m for m, _ in SHAPES])
async def test_tool_call_delta_shapes(
    sim: Sim, model: str, expected: list[tuple[Any, ...]]
) -> None:
    s = await stream(sim[0], model)
    assert shape(s.calls) == expected
    assert s.finishes == ["stop" if model == "no-index" else "tool_calls"] and s.done


async def test_per_response_counter_ids_use_the_second_tool(sim: Sim) -> None:
    calls = (await stream(sim[0], "name-index", tools=[SHELL, READ])).calls
    heads = [(c["index"], c["id"], c["function"]["name"]) for c in calls if "id" in c]
    assert heads == [(0, "shell_0", "shell"), (1, "read_file_1", "read_file")]
    assert [args_of(calls, i) for i in (0, 1)] == [
        '{"cmd":"echo round-1-0"}',
        '{"path":"echo round-1-1"}',  # the first *required* property
    ]


async def test_changing_ids_and_final_flush(sim: Sim) -> None:
    client, _ = sim
    every = [d["id"] for d in (await stream(client, "id-every-delta")).calls]
    assert len(every) == 5 and len(set(every)) == 5
    flushed = [d["function"]["arguments"] for d in (await stream(client, "final-flush")).calls]
    assert flushed == ["", *FRAGS, ROUND1]  # the client would assemble ROUND1 twice


async def test_no_finish_just_ends(sim: Sim) -> None:
    s = await stream(sim[0], "no-finish")
    assert args_of(s.calls) == ROUND1 and s.finishes == [] and not s.done
    assert b"[DONE]" not in s.raw and s.raw.endswith(b"}\n\n")


async def test_replay_once_replays_history_id_and_args_exactly_once(sim: Sim) -> None:
    client, _ = sim
    assert (await stream(client, "replay-once")).calls[0]["id"] == "run_shell_command_0"
    history = [USER, *answered("call_1_0_0badc0de", ROUND1)]
    replay = (await stream(client, "replay-once", history)).calls
    assert replay[0]["id"] == "call_1_0_0badc0de"
    assert args_of(replay) == ROUND1
    # The proxy answered the replay under a fresh id: the model moves on to round 2.
    history += answered("call_1_1_0badc0de", ROUND1)
    fresh = (await stream(client, "replay-once", history)).calls
    assert fresh[0]["id"] == "run_shell_command_0"
    assert args_of(fresh) == ROUND2
    kimi_history = [USER, *answered("functions.run_shell_command:0", ROUND1)]
    kimi = await stream(client, "kimi-k2/replay-once", kimi_history)
    assert kimi.calls[0]["id"] == "functions.run_shell_command:0"


async def test_restarted_replay_comes_back_under_the_response_counter(sim: Sim) -> None:
    client, _ = sim
    # Kimi: the history says `:1` for round 2's call; the replay restarts the counter at `:0`.
    history = [
        USER,
        *answered("functions.run_shell_command:0", ROUND1),
        *answered("functions.run_shell_command:1", ROUND2),
    ]
    replay = (await stream(client, "kimi-k2/replay-once-restarted", history)).calls
    assert replay[0]["id"] == "functions.run_shell_command:0"
    assert args_of(replay) == ROUND2
    # After round 1 the model still moves on: the replay follows round 2.
    for name in ("replay-once-restarted", "replay-loop-restarted"):
        early = await stream(client, name, history[:3])
        assert (early.calls[0]["id"], args_of(early.calls)) == ("run_shell_command_0", ROUND2)
    loop = (await stream(client, "replay-loop-restarted", history)).calls
    assert (loop[0]["id"], args_of(loop)) == ("run_shell_command_0", ROUND2)
    # Forever: a history that already holds the replay gets it again.
    again = await stream(client, "replay-loop-restarted", [*history, *answered("x_1", ROUND2)])
    assert (again.calls[0]["id"], args_of(again.calls)) == ("run_shell_command_0", ROUND2)


async def test_a_scripted_prompt_sets_each_round_and_replay_after_picks_the_replay(
    sim: Sim,
) -> None:
    client, _ = sim
    # One step per line, anywhere in any user message (as text parts too); other lines and
    # malformed steps are not steps.
    script = (
        'Do this:\nstep: list {"path": "/w"}\nstep: shell {"cmd": "echo a >> log"}\n'
        'step: broken {not json}\nstep: write {"path": "/w/o", "content": "x"}'
    )
    user = {"role": "user", "content": [{"type": "text", "text": script}]}
    messages: list[JSON] = [{"role": "user", "content": "context"}, user]
    steps = []
    for _ in range(6):
        s = await stream(client, "reference", messages, tools=[SHELL, READ])
        if not s.calls:
            break
        head, *rest = s.calls
        steps.append((head["function"]["name"], orjson.loads(args_of(rest))))
        messages += answered(head["id"], args_of(rest), head["function"]["name"])
    assert steps == [
        ("list", {"path": "/w"}),
        ("shell", {"cmd": "echo a >> log"}),
        ("write", {"path": "/w/o", "content": "x"}),
    ]
    assert s.content == "All 3 rounds done."  # the script's length replaces `rounds`
    # replay_after=2 replays round 2's call (the shell step) instead of round 1's.
    assert profile_for_model("replay-once+replay_after=2").replay_after == 2
    two_rounds = [{"role": "user", "content": script}, *answered("a_1", '{"path": "/w"}', "list")]
    two_rounds += answered("a_2", '{"cmd": "echo a >> log"}', "shell")
    replay = (await stream(client, "replay-once+replay_after=2", two_rounds)).calls
    assert (replay[0]["id"], orjson.loads(args_of(replay))) == ("a_2", {"cmd": "echo a >> log"})
    assert (await stream(client, "replay-once", two_rounds[:3])).calls[0]["id"] == "a_1"


async def test_replay_loop_and_mixed(sim: Sim) -> None:
    client, _ = sim
    history = [USER, *answered("a_1", ROUND1), *answered("a_2", ROUND1)]
    assert (await stream(client, "replay-loop", history)).calls[0]["id"] == "a_2"
    mixed = await stream(client, "replay-mixed", [USER, *answered("a_1", ROUND1)])
    heads = [d for d in mixed.calls if "id" in d]
    assert [(h["index"], h["id"]) for h in heads] == [(0, "a_1"), (1, "run_shell_command_1")]
    assert [args_of(mixed.calls, i) for i in (0, 1)] == [ROUND1, '{"command":"echo round-2-1"}']


async def test_fast_and_paced_text(sim: Sim) -> None:
    client, _ = sim
    fast = await stream(client, "fast")
    assert len(fast.chunks) == 1 + 200 + 1 and fast.finishes == ["stop"] and fast.done
    started = time.monotonic()
    paced = await stream(client, "paced+chunks=5+delay_ms=30")
    assert time.monotonic() - started >= 0.15 and paced.content == "word0 word1 word2 word3 word4 "


async def test_non_stream_shapes(asgi: Sim) -> None:
    client, log = asgi
    body = {"model": "missing-id", "messages": [USER]}
    data = (await client.post("/v1/chat/completions", json=body)).json()
    assert data["object"] == "chat.completion" and data["model"] == "missing-id"
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [
        {
            "type": "function",
            "function": {"name": "run_shell_command", "arguments": {"command": "echo round-1-0"}},
        }
    ]
    history = [USER, *answered("k0", ROUND1), *answered("k1", ROUND2)]
    body = {"model": "reference+rounds=2", "messages": history}
    data = (await client.post("/v1/chat/completions", json=body)).json()
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "All 2 rounds done."}
    assert data["usage"]["total_tokens"] > 0
    body = {"model": "fast+chunks=3", "messages": [USER]}
    fast = (await client.post("/v1/chat/completions", json=body)).json()
    assert fast["choices"][0]["message"]["content"] == "word0 word1 word2 "
    assert log.disconnects == 0


async def test_models_embeddings_and_404(asgi: Sim) -> None:
    client, _ = asgi
    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == list(PROFILES)
    body = {"model": "emb", "input": ["a", "b"]}
    first = (await client.post("/v1/embeddings", json=body)).json()
    again = (await client.post("/v1/embeddings", json=body)).json()
    assert first["data"] == again["data"] and len(first["data"][0]["embedding"]) == 8
    assert first["data"][0]["embedding"] != first["data"][1]["embedding"]
    packed = {**body, "encoding_format": "base64", "dimensions": 4}
    encoded = (await client.post("/v1/embeddings", json=packed)).json()["data"][0]["embedding"]
    assert len(base64.b64decode(encoded)) == 4 * 4  # four float32s
    missing = await client.post("/v1/completions", json={})
    assert missing.status_code == 404
    assert set(missing.json()["error"]) == {"message", "type", "code", "param"}


async def test_log_records_requests_paths_and_headers(asgi: Sim) -> None:
    client, log = asgi
    body = {"model": "kimi", "messages": [USER]}
    await client.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer k"})
    await client.get("/v1/models")
    assert log.requests == [body] and log.paths == ["/v1/chat/completions", "/v1/models"]
    assert log.headers[0]["authorization"] == "Bearer k"
    log.clear()
    assert (log.requests, log.paths, log.headers, log.disconnects) == ([], [], [], 0)


async def test_http_error_faults(asgi: Sim) -> None:
    client, _ = asgi
    limited = await client.post("/v1/chat/completions", json=request("fault-429"))
    assert limited.status_code == 429 and limited.headers["retry-after"] == "7"
    assert limited.headers["x-ratelimit-remaining-requests"] == "0"
    assert limited.headers["x-request-id"] == "sim-req-1"
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    broken = await client.post("/v1/chat/completions", json=request("fault-500"))
    assert broken.status_code == 500 and broken.json()["error"]["type"] == "server_error"


async def test_fault_reset_breaks_the_body(sim: Sim) -> None:
    received = b""
    with pytest.raises(httpx.TransportError):
        async with sim[0].stream("POST", "/v1/chat/completions", json=request("fault-reset")) as r:
            async for piece in r.aiter_raw():
                received += piece
    assert b"Let me " in received and b"[DONE]" not in received


async def test_framing_faults(sim: Sim) -> None:
    client, _ = sim
    garbage = await stream(client, "fault-garbage")
    assert b"data: not json\n\n" in garbage.raw and b": keep-alive\n\n" in garbage.raw
    assert garbage.content == "Let me run that." and garbage.finishes == ["tool_calls"]
    crlf = await stream(client, "fault-crlf")
    assert b"\r\n\r\n" in crlf.raw and b"\n\n" not in crlf.raw.replace(b"\r\n", b"")
    assert crlf.raw.startswith(b"data:{") and crlf.done and crlf.finishes == ["tool_calls"]
    huge = await stream(client, "fault-huge+kb=64")
    assert len(huge.content) == 64 * 1024
    drip = await stream(client, "fault-drip")
    assert drip.content == "Let me run that… ✓" and drip.done


async def test_drip_writes_one_byte_per_body_message() -> None:
    messages: list[JSON] = []
    finished = asyncio.Event()
    body = orjson.dumps(request("fault-drip+rounds=0"))
    incoming = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> JSON:
        if incoming:
            return incoming.pop()
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: JSON) -> None:
        messages.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            finished.set()

    scope = {"type": "http", "method": "POST", "headers": [], "query_string": b""}
    app = create_simulator_app()
    await app({**scope, "path": "/v1/chat/completions"}, receive, send)  # type: ignore[arg-type]
    bodies = [m["body"] for m in messages if m["type"] == "http.response.body" and m["body"]]
    assert len(bodies) > 100 and {len(b) for b in bodies} == {1}
    assert parse_sse(b"".join(bodies)).content == "All 0 rounds done."


async def test_stall_delays_and_hang_ends_on_disconnect(sim: Sim) -> None:
    client, log = sim
    started = time.monotonic()
    stalled = await stream(client, "fault-stall+stall_s=0.3")
    assert time.monotonic() - started >= 0.3 and stalled.done
    with pytest.raises(httpx.ReadTimeout):
        await client.post("/v1/chat/completions", json=request("fault-hang"), timeout=0.2)
    await wait_for(lambda: log.disconnects == 1)


async def test_disconnect_is_counted(sim: Sim) -> None:
    client, log = sim
    payload = request("paced+chunks=1000+delay_ms=5")
    async with client.stream("POST", "/v1/chat/completions", json=payload) as response:
        async for piece in response.aiter_raw():
            assert piece.startswith(b"data: ")
            break
    await wait_for(lambda: log.disconnects == 1)
    assert log.completed_streams == 0
    # A stalled stream is cancelled by the disconnect too, not left sleeping for 30 s.
    payload = request("fault-stall")
    async with client.stream("POST", "/v1/chat/completions", json=payload) as response:
        async for _ in response.aiter_raw():
            break
    await wait_for(lambda: log.disconnects == 2)


async def test_openai_sdk_reads_the_reference_stream(server: Server) -> None:
    openai = pytest.importorskip("openai")
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="sk-sim")
    events = await client.chat.completions.create(model="reference", messages=[USER], stream=True)
    name, args = "", ""
    async for event in events:
        for call in event.choices[0].delta.tool_calls or [] if event.choices else []:
            name += call.function.name or ""
            args += call.function.arguments or ""
    await client.close()
    assert (name, args) == ("run_shell_command", ROUND1)


async def test_openapi_page_documents_the_endpoints_and_the_profiles(asgi: Sim) -> None:
    client, _ = asgi
    spec = (await client.get("/openapi.json")).json()
    assert {
        "/v1/chat/completions",
        "/v1/models",
        "/v1/embeddings",
        "/v1/responses",
    } <= set(spec["paths"])
    chat = spec["paths"]["/v1/chat/completions"]["post"]
    schema = chat["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["messages"] and "stream" in schema["properties"]
    assert {"200", "400", "429", "500"} <= set(chat["responses"])
    assert "text/event-stream" in chat["responses"]["200"]["content"]
    assert all(f"`{name}`" in spec["info"]["description"] for name in PROFILES)
    page = await client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "'/openapi.json'" in page.text
    # The documented example is a request the simulator answers, as a stream.
    answer = await client.post("/v1/chat/completions", json=schema["example"])
    assert parse_sse(answer.content).calls[0]["function"]["name"] == "run_shell_command"


async def test_documented_bodies_are_not_validated_by_the_framework(asgi: Sim) -> None:
    """A body the schema would refuse still gets the provider's own 400, never a 422."""
    client, log = asgi
    for body in (b"not json", b"[1]", b'{"model": "kimi"}'):
        answer = await client.post("/v1/chat/completions", content=body)
        assert answer.status_code == 400
        assert answer.json()["error"]["type"] == "invalid_request_error"
    assert log.paths == ["/v1/chat/completions"] * 3


async def test_the_proxy_serves_the_simulator_page_under_its_mount() -> None:
    """`make run` without an upstream mounts the simulator at /_simulator in the proxy."""
    route = Route(name="simulator", upstream="http://127.0.0.1:9/_simulator/v1")
    app = create_app(Settings(routes=(route,), simulated=True))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
        page = await client.get(f"{SIMULATOR_MOUNT}/docs")
        assert page.status_code == 200 and f"'{SIMULATOR_MOUNT}/openapi.json'" in page.text
        spec = (await client.get(f"{SIMULATOR_MOUNT}/openapi.json")).json()
        assert spec["servers"] == [{"url": SIMULATOR_MOUNT}]  # "Try it out" calls the mount
        assert "/v1/chat/completions" in spec["paths"]
        models = await client.get(f"{SIMULATOR_MOUNT}/v1/models")
        assert [m["id"] for m in models.json()["data"]] == list(PROFILES)
        missing = await client.post(f"{SIMULATOR_MOUNT}/v1/audio/speech", json={})
        assert missing.json()["error"]["message"] == "Invalid URL (POST /v1/audio/speech)"
