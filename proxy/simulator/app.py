"""The simulated OpenAI-compatible upstream: routes, SSE framing, faults and recording.

Everything a response will contain is decided and serialized before the first byte goes out
(`plan_reply` plus `_frames`), so the streaming loop only paces bytes and injects transport
faults; that keeps the benchmark profiles cheap. Responses written incrementally go through
`_Writer`, which watches the ASGI receive channel itself: uvicorn does not tell a streaming app
that its client left (send() returns quietly), and sleeping faults must end when it does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import struct
import time
from collections.abc import AsyncIterator

import orjson
from fastapi import FastAPI, Request
from fastapi.middleware import Middleware
from fastapi.responses import Response, StreamingResponse

from proxy import __version__
from proxy.server.asgi import ASGIApp, Receive, Scope, Send
from proxy.simulator import anthropic, docs, responses
from proxy.simulator.profiles import (
    JSON,
    PROFILES,
    Fault,
    PlannedCall,
    Profile,
    Reply,
    arguments_value,
    plan_reply,
    profile_for_model,
    random_id,
    tool_call_deltas,
)
from proxy.simulator.providers import refusal

_FINGERPRINT = "fp_toolcall_sim"
_STREAM_FAULT_AT = 3  # stall and reset strike after the role chunk and a bit of content
_GARBAGE = (b"data: not json\n\n", b": keep-alive\n\n")


class SimulatedReset(RuntimeError):
    """Raised inside a response body so the server drops the connection mid-body."""


class SimulatorLog:
    """What the simulator saw, for tests to assert on (one event loop, no locking needed)."""

    def __init__(self) -> None:
        self.requests: list[JSON] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.kimi_history_ok: list[bool] = []
        self.disconnects = 0
        self.completed_streams = 0

    def clear(self) -> None:
        self.requests.clear()
        self.paths.clear()
        self.headers.clear()
        self.kimi_history_ok.clear()
        self.disconnects = 0
        self.completed_streams = 0


def _error(status: int, message: str, type_: str, code: str | None, **headers: str) -> Response:
    body = {"error": {"message": message, "type": type_, "code": code, "param": None}}
    headers = {k.replace("_", "-"): v for k, v in headers.items()}
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def _usage(body: JSON, reply: Reply) -> JSON:
    # Deterministic stand-ins for token counts: about four bytes per token.
    prompt = max(1, len(orjson.dumps(body.get("messages"))) // 4)
    produced = sum(len(c) for c in reply.content)
    produced += sum(len(c.name) + len(c.arguments) for c in reply.calls)
    completion = max(1, produced // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _frames(profile: Profile, body: JSON, reply: Reply, model: str) -> list[bytes]:
    """The complete SSE body, one element per event (garbage and comments included)."""
    head: JSON = {
        "id": "chatcmpl-" + random_id("", 29),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": _FINGERPRINT,
    }
    if profile.obfuscation:
        head["obfuscation"] = random_id("", 12)
    sep, prefix = (b"\r\n\r\n", b"data:") if profile.fault is Fault.CRLF else (b"\n\n", b"data: ")

    def chunk(delta: JSON, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return prefix + orjson.dumps({**head, "choices": [choice]}) + sep

    # Content chunks dominate benchmark streams: serialize their envelope once, splice the text.
    marker = "\x00sim-content\x00"
    before, after = chunk({"content": marker}).split(orjson.dumps(marker))
    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"reasoning_content": part}) for part in _reasoning_parts(profile)]
    frames += [before + orjson.dumps(text) + after for text in reply.content]
    calls_at = len(frames)
    frames += [chunk(delta) for delta in tool_call_deltas(profile, reply.calls)]
    calls = range(calls_at, len(frames) - 1)  # a junk line after these is inside a call
    if reply.finish_reason is not None:
        frames.append(chunk({}, reply.finish_reason))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        usage = {**head, "choices": [], "usage": _usage(body, reply)}
        frames.append(prefix + orjson.dumps(usage) + sep)
    if profile.terminate:
        frames.append(prefix + b"[DONE]" + sep)
    if profile.fault is Fault.GARBAGE:
        frames = _with_garbage(frames, calls)
    elif profile.fault is Fault.GARBAGE_IN_CALL and len(calls):
        # A broken line between two of a call's argument deltas (SPEC §4: the stream must
        # end with an error, never the call completed without what the line may have held).
        frames.insert(calls.start + 1, b'data: {"choices":[{"index":0,"delta":{"tool_ca' + sep)
    return frames


def _with_garbage(frames: list[bytes], calls: range) -> list[bytes]:
    """Junk before the first event and after every second one (never after the last, nor
    inside a call's arguments, where a line that is not JSON ends the stream: SPEC §4), as
    relays send while they wait."""
    last = len(frames) - 1
    out = [_GARBAGE[1]]
    for n, frame in enumerate(frames):
        out.append(frame)
        if n % 2 and n < last and n not in calls:
            out.append(_GARBAGE[n // 2 % 2])
    return out


def _message_tool_calls(profile: Profile, calls: tuple[PlannedCall, ...]) -> list[JSON]:
    """`message.tool_calls` of a non-streaming response, in the profile's id and argument shape."""
    return [
        {
            **({} if call.call_id is None else {"id": call.call_id}),
            **({} if profile.omit_type else {"type": "function"}),
            "function": {"name": call.name, "arguments": arguments_value(profile, call)},
        }
        for call in calls
    ]


def _reasoning_parts(profile: Profile) -> list[str]:
    """A thinking profile's reasoning in word-sized deltas, as thinking models stream it."""
    words = profile.reasoning.split(" ")
    return [word + " " for word in words[:-1]] + words[-1:] if profile.reasoning else []


def _lost_reasoning(profile: Profile, body: JSON) -> Response | None:
    """A thinking model's 400 for a tool-call turn sent back without its reasoning."""
    if not profile.reasoning_required:
        return None
    for message in body.get("messages") or ():
        lost = not isinstance(message, dict) or not message.get("reasoning_content")
        if lost and isinstance(message, dict) and message.get("tool_calls"):
            return _error(
                400,
                "thinking is enabled but reasoning_content is missing in assistant tool "
                "call message (simulated)",
                "invalid_request_error",
                None,
            )
    return None


# OpenAI's words for a history whose calls and results do not pair (SPEC §11).
UNANSWERED_CALLS = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
UNEXPECTED_RESULT = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)


def _unpaired(profile: Profile, body: JSON) -> Response | None:
    """A strict provider's 400 for a history whose calls and `tool` messages do not pair."""
    if not profile.strict:
        return None
    awaiting: list[object] = []  # the last assistant message's calls not answered yet
    for message in body.get("messages") or ():
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            if message.get("tool_call_id") not in awaiting:
                return _error(400, UNEXPECTED_RESULT, "invalid_request_error", None)
            awaiting.remove(message.get("tool_call_id"))
            continue
        if awaiting:
            ids = ", ".join(map(str, awaiting))
            text = UNANSWERED_CALLS.format(ids=ids)
            return _error(400, text, "invalid_request_error", None)
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        awaiting = [c.get("id") for c in calls if isinstance(c, dict)] if calls else []
    if awaiting:
        text = UNANSWERED_CALLS.format(ids=", ".join(map(str, awaiting)))
        return _error(400, text, "invalid_request_error", None)
    return None


def _completion(profile: Profile, body: JSON, reply: Reply, model: str) -> bytes:
    message: JSON = {"role": "assistant", "content": "".join(reply.content) or None}
    if profile.reasoning:
        message["reasoning_content"] = profile.reasoning
    if reply.calls:
        message["tool_calls"] = _message_tool_calls(profile, reply.calls)
    return orjson.dumps(
        {
            "id": "chatcmpl-" + random_id("", 29),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": _FINGERPRINT,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": _usage(body, reply),
        }
    )


async def _paced(profile: Profile, frames: list[bytes], fault_at: int) -> AsyncIterator[bytes]:
    delay = profile.delay_ms / 1000
    for n, frame in enumerate(frames):
        if n == fault_at and profile.fault is Fault.STALL:
            await asyncio.sleep(profile.stall_s)
        if n == fault_at and profile.fault is Fault.RESET:
            raise SimulatedReset("simulated connection reset")
        if profile.fault is Fault.DRIP:
            for i in range(len(frame)):
                yield frame[i : i + 1]
                await asyncio.sleep(0)
        else:
            yield frame
        if delay and n + 1 < len(frames):
            await asyncio.sleep(delay)


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class _Writer(StreamingResponse):
    """A streaming response that records whether its client stayed to the end."""

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        log: SimulatorLog,
        media_type: str,
        head_delay_s: float = 0.0,
    ) -> None:
        super().__init__(frames, media_type=media_type)
        self._log = log
        self._head_delay_s = head_delay_s

    async def _pump(self, send: Send) -> None:
        if self._head_delay_s:
            await asyncio.sleep(self._head_delay_s)
        await self.stream_response(send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pump = asyncio.ensure_future(self._pump(send))
        watch = asyncio.ensure_future(_until_disconnect(receive))
        try:
            await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self._log.disconnects += 1  # the server gave up on this response
            raise
        finally:
            left = watch.done() and not pump.done()
            for task in (pump, watch):
                task.cancel()
            await asyncio.gather(pump, watch, return_exceptions=True)
            # Run the generator's cleanup now rather than whenever it is garbage-collected.
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        error = None if pump.cancelled() else pump.exception()
        if left or isinstance(error, OSError):
            self._log.disconnects += 1
        elif error is not None:
            raise error
        else:
            self._log.completed_streams += 1


def _route_path(scope: Scope) -> str:
    """The request's path under the app's mount point (`root_path`), as its routes see it."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class _Recorder:
    """Pure ASGI wrapper recording every request's path and headers before routing."""

    def __init__(self, app: ASGIApp, log: SimulatorLog) -> None:
        self._app = app
        self._log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self._log.paths.append(_route_path(scope))
            headers: dict[str, str] = {}
            for raw_name, raw_value in scope["headers"]:
                name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
            self._log.headers.append(headers)
        await self._app(scope, receive, send)


async def _json_body(request: Request) -> JSON | Response:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return _error(400, "request body is not valid JSON", "invalid_request_error", None)
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object", "invalid_request_error", None)
    return body


class _Simulator:
    def __init__(self, log: SimulatorLog) -> None:
        self.log = log
        self.stored = responses.ResponseStore()  # Responses' stored conversations

    async def chat(self, request: Request) -> Response:
        body = await _json_body(request)
        if isinstance(body, Response):
            return body
        self.log.requests.append(body)
        if not isinstance(body.get("messages"), list):
            return _error(400, "'messages' must be a list", "invalid_request_error", None)
        model = body.get("model")
        model = model if isinstance(model, str) else ""
        try:
            profile = profile_for_model(model)
        except ValueError as exc:
            return _error(400, str(exc), "invalid_request_error", "invalid_model")
        if profile.fault is Fault.RATE_LIMIT:
            return _error(
                429,
                "Rate limit reached for requests (simulated)",
                "requests",
                "rate_limit_exceeded",
                retry_after="7",
                x_ratelimit_remaining_requests="0",
                x_request_id="sim-req-1",
            )
        if profile.fault is Fault.SERVER_ERROR:
            return _error(500, "The server had an error (simulated)", "server_error", None)
        lost = _lost_reasoning(profile, body) or _unpaired(profile, body)
        if lost is not None:
            return lost
        refused = refusal(profile.provider, body)
        if refused is not None:  # a provider family's strict API (SPEC §11)
            return Response(orjson.dumps(refused[1]), refused[0], media_type="application/json")
        reply = plan_reply(profile, body)
        if body.get("stream") is True:
            return self._answer(profile, reply, frames=_frames(profile, body, reply, model))
        return self._answer(profile, reply, payload=_completion(profile, body, reply, model))

    def _answer(
        self,
        profile: Profile,
        reply: Reply,
        *,
        frames: list[bytes] | None = None,
        payload: bytes = b"",
    ) -> Response:
        """A planned reply as an event stream (`frames`) or one body, with the profile's
        transport faults."""
        if reply.kimi_history_ok is not None:
            self.log.kimi_history_ok.append(reply.kimi_history_ok)
        hang = profile.stall_s if profile.fault is Fault.HANG else 0.0
        if frames is not None:
            paced = _paced(profile, frames, _STREAM_FAULT_AT)
            return _Writer(paced, self.log, "text/event-stream", hang)
        if profile.fault in (Fault.RESET, Fault.STALL, Fault.DRIP, Fault.HANG):
            # Two writes, so a stall or reset lands in the middle of the JSON body.
            halves = [payload[: len(payload) // 2], payload[len(payload) // 2 :]]
            return _Writer(_paced(profile, halves, 1), self.log, "application/json", hang)
        return Response(payload, media_type="application/json")

    async def messages(self, request: Request) -> Response:
        """Anthropic Messages, in the same profiles' quirks (proxy/simulator/anthropic.py)."""
        body = await anthropic.read_body(request)
        if isinstance(body, Response):
            return body
        self.log.requests.append(body)
        planned = anthropic.plan(body)
        if isinstance(planned, Response):
            return planned
        profile, reply, model = planned
        if profile.chat_only:
            return _unknown_url(request)
        if body.get("stream") is True:
            frames = anthropic.event_frames(profile, body, reply, model)
            return self._answer(profile, reply, frames=frames)
        return self._answer(
            profile, reply, payload=anthropic.message_body(profile, body, reply, model)
        )

    async def count_tokens(self, request: Request) -> Response:
        body = await anthropic.read_body(request)
        if isinstance(body, Response):
            return body
        model = body.get("model")
        with contextlib.suppress(ValueError):  # a bad option is the count's business, not ours
            if profile_for_model(model if isinstance(model, str) else "").chat_only:
                return _unknown_url(request)
        return Response(anthropic.count_tokens(body), media_type="application/json")

    async def responses(self, request: Request) -> Response:
        """OpenAI Responses, in the same profiles' quirks (proxy/simulator/responses.py)."""
        body = await responses.read_body(request)
        if isinstance(body, Response):
            return body
        self.log.requests.append(body)
        planned = responses.plan(body, self.stored)
        if isinstance(planned, Response):
            return planned
        profile, reply, model, items = planned
        if profile.chat_only:
            return _unknown_url(request)
        if body.get("stream") is True:
            frames = responses.event_frames(profile, body, reply, model, items, self.stored)
            return self._answer(profile, reply, frames=frames)
        payload = responses.response_body(profile, body, reply, model, items, self.stored)
        return self._answer(profile, reply, payload=payload)

    async def models(self, request: Request) -> Response:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "toolcall-proxy-simulator"}
            for name in PROFILES
        ]
        return Response(
            orjson.dumps({"object": "list", "data": data}), media_type="application/json"
        )

    async def embeddings(self, request: Request) -> Response:
        body = await _json_body(request)
        if isinstance(body, Response):
            return body
        raw = body.get("input")
        inputs = raw if isinstance(raw, list) and raw and not isinstance(raw[0], int) else [raw]
        dims = body.get("dimensions")
        dims = dims if isinstance(dims, int) and 0 < dims <= 4096 else 8
        data: list[JSON] = []
        for index, item in enumerate(inputs):
            vector = _embedding(orjson.dumps(item), dims)
            encoded: object = vector
            if body.get("encoding_format") == "base64":
                # The openai SDK asks for base64 float32 by default and decodes it itself.
                encoded = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = max(1, len(orjson.dumps(raw)) // 4)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        result = {"object": "list", "data": data, "model": body.get("model"), "usage": usage}
        return Response(orjson.dumps(result), media_type="application/json")

    async def not_found(self, request: Request) -> Response:
        return _unknown_url(request)


def _unknown_url(request: Request) -> Response:
    """OpenAI's answer to a path it does not serve (and a Chat-only server's to the others)."""
    message = f"Invalid URL ({request.method} {_route_path(request.scope)})"
    return _error(404, message, "invalid_request_error", "unknown_url")


def _embedding(seed: bytes, dims: int) -> list[float]:
    stream = b"".join(hashlib.sha256(seed + bytes([i])).digest() for i in range(dims // 32 + 1))
    vector = [(b - 127.5) / 127.5 for b in stream[:dims]]
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


_ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def create_simulator_app(log: SimulatorLog | None = None) -> FastAPI:
    """The simulated upstream; `app.state.log` is the log it records into.

    A FastAPI app for its OpenAPI page (`/docs`, `/openapi.json`): the endpoints take the raw
    request and return their own responses, so FastAPI neither parses bodies nor touches the
    streams' bytes and pacing.
    """
    log = log if log is not None else SimulatorLog()
    sim = _Simulator(log)
    app = FastAPI(
        title=docs.TITLE,
        version=__version__,
        description=docs.description(),
        middleware=[Middleware(_Recorder, log=log)],
    )
    app.add_api_route("/v1/chat/completions", sim.chat, methods=["POST"], **docs.CHAT)
    app.add_api_route("/v1/messages", sim.messages, methods=["POST"], **docs.MESSAGES)
    app.add_api_route(
        "/v1/messages/count_tokens", sim.count_tokens, methods=["POST"], **docs.COUNT_TOKENS
    )
    app.add_api_route("/v1/responses", sim.responses, methods=["POST"], **docs.RESPONSES)
    app.add_api_route("/v1/models", sim.models, methods=["GET"], **docs.MODELS)
    app.add_api_route("/v1/embeddings", sim.embeddings, methods=["POST"], **docs.EMBEDDINGS)
    app.add_api_route("/{path:path}", sim.not_found, methods=_ALL_METHODS, include_in_schema=False)
    app.state.log = log
    return app


__all__ = ["SimulatedReset", "SimulatorLog", "create_simulator_app"]
