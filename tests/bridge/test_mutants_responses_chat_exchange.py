"""SPEC §9: the Responses bridge's exchange as the shell builds it: a first whole answer
that is not a chat completion is a broken upstream with its code and message, and the ids
come from the entropy the shell hands the factory (the mutation audit found these
unpinned)."""

from __future__ import annotations

from typing import Any

from proxy.bridge.responses_chat.exchange import new_responses_over_chat
from proxy.core.events import Forward, UpstreamBroken
from proxy.core.rounds import RouteRules
from tests.bridge.responses_chat.wire import body, run
from tests.chat.helpers import finish, role, sse, text
from tests.responses.helpers import parse

JSON = dict[str, Any]


def test_a_first_whole_answer_that_is_not_json_is_a_broken_upstream() -> None:
    result = run(body(stream=False), [[b"oops"]], stream=False)
    assert isinstance(result.end, UpstreamBroken)
    assert result.end.error.code == "upstream_bad_response"
    assert result.end.error.message == (
        "the upstream answered with a body that is not a chat completion"
    )
    assert result.client == b""


def test_the_shells_factory_draws_ids_from_the_entropy_it_is_given() -> None:
    def zeros(n: int) -> bytes:
        return b"\x00" * n

    upstream = sse(role(), text("Hi"), finish("stop"))

    def client() -> JSON:
        exchange = new_responses_over_chat(body(), b"", RouteRules(), zeros)
        exchange.begin_round(stream=True)
        out = b"".join(
            e if isinstance(e, bytes) else e.data if isinstance(e, Forward) else b""
            for e in exchange.feed(upstream)
        )
        response: JSON = parse(out)[-1]["response"]
        return response

    first, second = client(), client()
    assert first["id"] == second["id"] == "resp_" + "00" * 12
    assert first["output"][0]["id"] == second["output"][0]["id"]
