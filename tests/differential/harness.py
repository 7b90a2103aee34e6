"""One stream, two runs of the same SDK: straight from the canned upstream and through the
proxy in front of it; the normalised difference between the two is the test's verdict."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import anthropic
import openai

from tests.differential import compare, sdk
from tests.differential.canned import CannedUpstream
from tests.differential.corpus import Case, events, reference_body, tool_names
from tests.differential.sdk import JSON, Outcome

SCHEMA: JSON = {"type": "object", "properties": {}, "additionalProperties": True}
USER_TEXT = "Go on."


class Surface:
    """One API surface: its request, its SDK calls, its normalisation (compare.py)."""

    name = ""

    def request(self, tools: list[str]) -> JSON:
        raise NotImplementedError

    def stream(self, api: Any, key: str, request: JSON) -> Outcome:
        raise NotImplementedError

    def create(self, api: Any, key: str, request: JSON) -> Outcome:
        raise NotImplementedError

    def normalise(self, ref: Outcome, got: Outcome) -> list[str]:
        raise NotImplementedError

    def body_of(self, case: Case, streamed: Outcome) -> bytes:
        """The non-streaming body that carries what the stream carried."""
        raise NotImplementedError


class Chat(Surface):
    name = "chat"

    def request(self, tools: list[str]) -> JSON:
        body: JSON = {"model": "differential", "messages": [{"role": "user", "content": USER_TEXT}]}
        if tools:
            body["tools"] = [
                {"type": "function", "function": {"name": t, "parameters": SCHEMA}} for t in tools
            ]
        return body

    def stream(self, api: Any, key: str, request: JSON) -> Outcome:
        return sdk.chat_stream(api, key, request)

    def create(self, api: Any, key: str, request: JSON) -> Outcome:
        return sdk.chat_create(api, key, request)

    def normalise(self, ref: Outcome, got: Outcome) -> list[str]:
        assert ref.final is not None and got.final is not None
        return compare.normalise_chat(ref.final, got.final)

    def body_of(self, case: Case, streamed: Outcome) -> bytes:
        assert streamed.final is not None
        body = compare.strip_sdk_fields(streamed.final)
        body["object"] = "chat.completion"
        for choice in body.get("choices") or []:
            for call in (choice.get("message") or {}).get("tool_calls") or []:
                call.pop("index", None)
        return json.dumps(body).encode()


class Anthropic(Surface):
    def __init__(self, *, beta: bool) -> None:
        self.beta = beta
        self.name = "anthropic-beta" if beta else "anthropic"

    def request(self, tools: list[str]) -> JSON:
        body: JSON = {
            "model": "differential",
            "max_tokens": 4096,
            "messages": [{"role": "user", "content": USER_TEXT}],
        }
        if tools:
            body["tools"] = [{"name": t, "input_schema": SCHEMA} for t in tools]
        return body

    def stream(self, api: Any, key: str, request: JSON) -> Outcome:
        return sdk.anthropic_stream(api, key, request, beta=self.beta)

    def create(self, api: Any, key: str, request: JSON) -> Outcome:
        return sdk.anthropic_create(api, key, request, beta=self.beta)

    def normalise(self, ref: Outcome, got: Outcome) -> list[str]:
        assert ref.final is not None and got.final is not None
        return compare.normalise_anthropic(ref.final, got.final)

    def body_of(self, case: Case, streamed: Outcome) -> bytes:
        assert streamed.final is not None
        return json.dumps(compare.strip_sdk_fields(streamed.final)).encode()


class Responses(Surface):
    name = "responses"

    def request(self, tools: list[str]) -> JSON:
        body: JSON = {"model": "differential", "input": USER_TEXT}
        if tools:
            body["tools"] = [
                {"type": "function", "name": t, "parameters": SCHEMA, "strict": False}
                for t in tools
            ]
        return body

    def stream(self, api: Any, key: str, request: JSON) -> Outcome:
        return sdk.responses_stream(api, key, request)

    def create(self, api: Any, key: str, request: JSON) -> Outcome:
        return sdk.responses_create(api, key, request)

    def normalise(self, ref: Outcome, got: Outcome) -> list[str]:
        assert ref.final is not None and got.final is not None
        ref.items, problems = compare.normalise_responses(
            ref.final, got.final, ref.items, got.items
        )
        return problems

    def body_of(self, case: Case, streamed: Outcome) -> bytes:
        """The upstream's own final response (not the SDK's parse of it), with the streamed
        items where it left its `output` empty."""
        final = [e for e in events(case.body) if e.get("type") in sdk.TERMINAL]
        assert final, f"{case}: no terminal event to build a body from"
        response = copy.deepcopy(final[-1]["response"])
        if not response.get("output"):
            done = [e for e in events(case.body) if e.get("type") == "response.output_item.done"]
            response["output"] = [e["item"] for e in sorted(done, key=lambda e: e["output_index"])]
        return json.dumps(response).encode()


@dataclass
class Clients:
    """The same SDK twice: `direct` at the canned upstream, `proxied` at the proxy."""

    direct: Any
    proxied: Any


@dataclass
class Bench:
    """A module's canned upstream and the SDK clients for it and for the proxy before it."""

    canned: CannedUpstream
    openai: Clients
    anthropic: Clients


def openai_clients(upstream: str, proxy: str) -> Clients:
    def make(url: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=url + "/v1", api_key="sk-differential", max_retries=0)

    return Clients(make(upstream), make(proxy))


def anthropic_clients(upstream: str, proxy: str) -> Clients:
    def make(url: str) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=url, api_key="sk-ant-differential", max_retries=0)

    return Clients(make(upstream), make(proxy))


# -- running and judging ----------------------------------------------------------------------


def _verdict(surface: Surface, mode: str, ref: Outcome, got: Outcome) -> list[str]:
    if ref.error is not None:
        return [f"the SDK cannot accumulate the upstream's answer itself: {ref.error}"]
    if got.error is not None:
        return [f"through the proxy the SDK raised {got.error}"]
    ref.final, got.final = compare.strip_sdk_fields(ref.final), compare.strip_sdk_fields(got.final)
    ref.items, got.items = compare.strip_sdk_fields(ref.items), compare.strip_sdk_fields(got.items)
    problems = surface.normalise(ref, got)
    problems += compare.diff(ref.final, got.final)
    if mode == "stream" and isinstance(surface, Responses):
        problems += compare.diff(ref.items, got.items, "$output_item.done")
    return problems


def report(surface: Surface, case: Case, mode: str, problems: list[str]) -> str:
    head = (
        f"{surface.name} {mode} of {case.name} ({case.source}): {len(problems)} difference(s)"
        " between what the SDK accumulated straight from the upstream and through the proxy"
    )
    return "\n  ".join([head, *problems])


def _keys(
    surface: Surface, canned: CannedUpstream, clients: Clients, case: Case, mode: str, request: JSON
) -> tuple[str, str]:
    """The canned answers the direct and the proxied request replay. Straight from the
    upstream, a stream is read as SPEC §4 makes the client read it (`reference_body`)."""
    if mode == "stream":
        return canned.put(reference_body(case.body), stream=True), canned.put(
            case.body, stream=True
        )
    if mode == "create-of-stream":
        reference = canned.put(reference_body(case.body), stream=True)
        streamed = surface.stream(clients.direct, reference, request)
        assert streamed.error is None, f"{case}: the SDK cannot read the stream: {streamed.error}"
        key = canned.put(surface.body_of(case, streamed), stream=False)
        return key, key
    key = canned.put(case.body, stream=False)
    return key, key


def check(
    surface: Surface, canned: CannedUpstream, clients: Clients, case: Case, mode: str
) -> None:
    """`mode`: `stream`, `create` (a non-streaming body), or `create-of-stream` (the
    non-streaming body that carries what the stream carried)."""
    request = surface.request(tool_names(case))
    direct_key, proxied_key = _keys(surface, canned, clients, case, mode, request)
    run = surface.stream if mode == "stream" else surface.create
    ref = run(clients.direct, direct_key, request)
    got = run(clients.proxied, proxied_key, request)
    problems = _verdict(surface, mode, ref, got)
    assert not problems, report(surface, case, mode, problems)
