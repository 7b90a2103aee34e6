"""Helpers for the Responses core's tests: upstream event streams in every quirk, an exchange
run over them, and the client's view checked against SPEC §8's event grammar (and by the
openai SDK's own stream accumulator, which refuses what real clients refuse)."""

from __future__ import annotations

import itertools
import typing
from dataclasses import dataclass, field
from typing import Any

import orjson
from openai._models import construct_type_unchecked
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from proxy.core.events import ExchangeEvent, Forward, LoopDetected, OpenFollowup
from proxy.core.rounds import RouteRules
from proxy.core.sse import SSEDecoder
from proxy.responses.exchange import ResponsesExchange

TOOLS = [{"type": "function", "name": "bash", "parameters": {"type": "object"}}]
USER = {"role": "user", "content": "run it"}
# Kimi's markup for one call to `bash` (`{"command":"ls"}`), leaked into a message's text.
KIMI_MARKUP = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.bash:0"
    '<|tool_call_argument_begin|>{"command":"ls"}<|tool_call_end|><|tool_calls_section_end|>'
)


_COUNTER = itertools.count(1)


def entropy(n: int) -> bytes:
    """Deterministic 'random' bytes: distinct on every call, so minted ids never collide."""
    return next(_COUNTER).to_bytes(8, "big")[-n:].rjust(n, b"\x01")


def event(kind: str, **fields: Any) -> bytes:
    return (
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    )


def response_obj(status: str = "in_progress", **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_up",
        "object": "response",
        "created_at": 7,
        "model": "m",
        "status": status,
        "output": [],
        **extra,
    }


@dataclass
class Upstream:
    """An upstream's Responses stream, built event by event (sequence numbers are its own)."""

    events: list[bytes] = field(default_factory=list)
    index: int = 0

    def created(self) -> Upstream:
        self.events.append(event("response.created", response=response_obj(), sequence_number=0))
        self.events.append(
            event("response.in_progress", response=response_obj(), sequence_number=1)
        )
        return self

    def message(self, *pieces: str, done: bool = True) -> Upstream:
        i, item_id = self.index, f"msg_{self.index}"
        self.index += 1
        item = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        self.events.append(
            event("response.output_item.added", output_index=i, item=item, sequence_number=5)
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        ref = {"item_id": item_id, "output_index": i, "content_index": 0}
        self.events.append(
            event("response.content_part.added", **ref, part=part, sequence_number=5)
        )
        for piece in pieces:
            self.events.append(
                event("response.output_text.delta", **ref, delta=piece, sequence_number=5)
            )
        text = "".join(pieces)
        if done:
            self.events.append(
                event("response.output_text.done", **ref, text=text, sequence_number=5)
            )
            self.events.append(
                event(
                    "response.content_part.done",
                    **ref,
                    part={**part, "text": text},
                    sequence_number=5,
                )
            )
            final = {**item, "status": "completed", "content": [{**part, "text": text}]}
            self.events.append(
                event("response.output_item.done", output_index=i, item=final, sequence_number=5)
            )
        return self

    def call(
        self,
        call_id: Any,
        arguments: str = '{"command":"ls"}',
        *,
        name: str = "bash",
        item_id: Any = "fc_up",
        whole: bool = False,
        deltas: bool = True,
        flush: bool = False,
        done: bool = True,
        item_done: bool = True,
    ) -> Upstream:
        i = self.index
        self.index += 1
        item: dict[str, Any] = {
            "type": "function_call",
            "name": name,
            "arguments": arguments if whole else "",
            "status": "in_progress",
        }
        if call_id is not None:
            item["call_id"] = call_id
        if item_id is not None:
            item["id"] = item_id
        self.events.append(
            event("response.output_item.added", output_index=i, item=item, sequence_number=3)
        )
        ref = {"item_id": item_id or "", "output_index": i}
        if deltas:
            for k in range(0, len(arguments), 5):
                self.events.append(
                    event(
                        "response.function_call_arguments.delta",
                        **ref,
                        delta=arguments[k : k + 5],
                        sequence_number=3,
                    )
                )
        if flush:
            self.events.append(
                event(
                    "response.function_call_arguments.delta",
                    **ref,
                    delta=arguments,
                    sequence_number=3,
                )
            )
        if done:
            self.events.append(
                event(
                    "response.function_call_arguments.done",
                    **ref,
                    arguments=arguments,
                    sequence_number=3,
                )
            )
        if item_done:
            final = {**item, "arguments": arguments, "status": "completed"}
            self.events.append(
                event("response.output_item.done", output_index=i, item=final, sequence_number=3)
            )
        return self

    def raw(self, data: bytes) -> Upstream:
        self.events.append(data)
        return self

    def completed(
        self, usage: dict[str, Any] | None = None, *, kind: str = "response.completed"
    ) -> Upstream:
        usage = usage or {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        self.events.append(
            event(kind, response=response_obj("completed", usage=usage), sequence_number=99)
        )
        return self

    def body(self) -> bytes:
        return b"".join(self.events)

    def numbered(self) -> bytes:
        """The body with sequence numbers as a real upstream writes them: 0, 1, 2, ..."""
        return b"".join(self.numbered_events())

    def numbered_events(self) -> list[bytes]:
        """The events numbered 0, 1, 2, ... (each event's `sequence_number` rewritten in
        place, so its keys keep their order)."""
        out = []
        for n, data in enumerate(self.events):
            head, _, rest = data.partition(b"data: ")
            obj = orjson.loads(rest)
            obj["sequence_number"] = n
            out.append(head + b"data: " + orjson.dumps(obj) + b"\n\n")
        return out


def request(*items: dict[str, Any], model: str = "m", **extra: Any) -> dict[str, Any]:
    return {"model": model, "input": [USER, *items], "tools": TOOLS, "stream": True, **extra}


def answered_call(
    call_id: str, arguments: str = '{"command":"ls"}', name: str = "bash"
) -> list[dict[str, Any]]:
    return [
        {
            "type": "function_call",
            "id": "fc_old",
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
        },
        {"type": "function_call_output", "call_id": call_id, "output": "done"},
    ]


@dataclass
class Run:
    """What the client received over every round, and what the exchange asked for."""

    exchange: ResponsesExchange
    body: bytes = b""
    followups: list[OpenFollowup] = field(default_factory=list)
    loop: LoopDetected | None = None
    ended: bool = False

    @property
    def events(self) -> list[dict[str, Any]]:
        return parse(self.body)

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]


def run(
    body: dict[str, Any],
    *rounds: bytes,
    rules: RouteRules | None = None,
    stream: bool = True,
    split: int | None = None,
) -> Run:
    """Feed each round's upstream body to one exchange (in `split`-byte reads when given)."""
    exchange = ResponsesExchange(body, orjson.dumps(body), rules or RouteRules(), entropy=entropy)
    result = Run(exchange)
    for data in rounds:
        exchange.begin_round(stream=stream)
        reads = (
            [data] if split is None else [data[k : k + split] for k in range(0, len(data), split)]
        )
        events: list[ExchangeEvent] = []
        for read in reads:
            events += exchange.feed(read)
            if _take(result, events):
                break
            events = []
        else:
            _take(result, exchange.end())
        if result.loop is not None or result.ended:
            break
    return result


def _take(result: Run, events: list[ExchangeEvent]) -> bool:
    """True when the round is over (a follow-up, a loop, or the end of the response)."""
    over = False
    for item in events:
        if isinstance(item, bytes):
            result.body += item
        elif isinstance(item, Forward):
            result.body += item.data
            result.ended = result.ended or item.last
            over = over or item.last
        elif isinstance(item, OpenFollowup):
            result.followups.append(item)
            over = True
        elif isinstance(item, LoopDetected):
            result.loop = item
            over = True
    return over


def parse(data: bytes) -> list[dict[str, Any]]:
    decoder = SSEDecoder()
    out = []
    for ev in decoder.feed(data) + decoder.end():
        if ev.data is None:
            continue
        parsed = orjson.loads(ev.data)
        kind = next((line[7:].decode() for line in ev.other if line.startswith(b"event: ")), None)
        assert kind == parsed["type"], (kind, parsed)
        out.append(parsed)
    return out


def _sdk_event_types() -> frozenset[str]:
    """Every event type the openai SDK's stream event union names."""
    union = typing.get_args(ResponseStreamEvent)[0]
    return frozenset(
        kind
        for model in typing.get_args(union)
        for kind in typing.get_args(model.model_fields["type"].annotation)
    )


SDK_EVENT_TYPES = _sdk_event_types()


def check_grammar(
    events: list[dict[str, Any]],
    *,
    completed: bool = True,
    exact: bool = True,
    passed_on: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """SPEC §8's canonical grammar on what the client received; returns the final response.

    `exact`: the completed `output` equals the streamed done items (so where the upstream's
    own `response.completed` lists nothing newer); without it, the test checks the output.
    `passed_on`: event types the test's upstream sent that the SDK does not know (the proxy
    passes them on, renumbered only); any other type must be one the SDK knows."""
    unknown = {e.get("type") for e in events} - SDK_EVENT_TYPES - passed_on
    assert not unknown, f"event types the SDK does not know: {sorted(map(str, unknown))}"
    seqs = [e["sequence_number"] for e in events]
    assert seqs == sorted(set(seqs)), f"sequence numbers not strictly increasing: {seqs}"
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == list(range(len(added))), f"output indexes not dense in order: {added}"
    assert [e["type"] for e in events].count("response.created") <= 1
    done_items: dict[int, dict[str, Any]] = {}
    for index in added:
        _check_item(events, index, done_items)
    final = [e for e in events if e["type"] in ("response.completed", "response.incomplete")]
    if not completed:
        assert not final
        return {}
    assert len(final) == 1 and events[-1] is final[0], "exactly one completion, last"
    output = final[0]["response"]["output"]
    if exact:
        assert output == [done_items[i] for i in sorted(done_items)], "output != streamed"
    _sdk_accepts(events)
    return final[0]["response"]


def _check_item(
    events: list[dict[str, Any]], index: int, done_items: dict[int, dict[str, Any]]
) -> None:
    mine = [e for e in events if e.get("output_index") == index]
    item = mine[0]["item"]
    dones = [e for e in mine if e["type"] == "response.output_item.done"]
    assert len(dones) == 1 and dones[0] is mine[-1], f"item {index}: one output_item.done, last"
    done_items[index] = dones[0]["item"]
    if item["type"] != "function_call":
        return
    assert item["arguments"] == "", "a call's output_item.added carries empty arguments"
    assert item["id"] and item["call_id"]
    deltas = "".join(
        e["delta"] for e in mine if e["type"] == "response.function_call_arguments.delta"
    )
    arg_dones = [e for e in mine if e["type"] == "response.function_call_arguments.done"]
    assert len(arg_dones) == 1 and arg_dones[0]["arguments"] == deltas
    assert all(e["item_id"] == item["id"] for e in mine if "item_id" in e)
    final = dones[0]["item"]
    assert (final["id"], final["call_id"], final["arguments"]) == (
        item["id"],
        item["call_id"],
        deltas,
    )
    orjson.loads(deltas)  # whole arguments are JSON


def _sdk_accepts(events: list[dict[str, Any]]) -> None:
    """The openai SDK's own accumulator (what `responses.stream` runs) takes the stream."""
    state = ResponseStreamState(input_tools=TOOLS, text_format=omit)
    for raw in events:
        state.handle_event(construct_type_unchecked(type_=ResponseStreamEvent, value=raw))  # type: ignore[arg-type]
    assert state._completed_response is not None


def calls_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == "function_call"]
