"""One probe per API surface the proxy knows (proxy.core.surfaces), answered or not."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from proxy.core.surfaces import SURFACES
from proxy.doctor.diagnose import diagnose
from proxy.doctor.probes import PROBES, SurfaceResult
from proxy.doctor.recommend import upstream_api
from proxy.simulator import create_simulator_app
from tests.servers import serving


def test_every_surface_has_a_probe() -> None:
    assert set(PROBES) == {surface.path for surface in SURFACES}


async def messages(request: Request) -> JSONResponse:
    body = await request.json()
    return JSONResponse(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": "OK"}],
            "stop_reason": "end_turn",
        }
    )


async def responses(request: Request) -> JSONResponse:
    return JSONResponse({"id": "resp_1", "object": "response", "status": "completed", "output": []})


def test_a_provider_that_serves_all_three_surfaces() -> None:
    app = Starlette(
        routes=[
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Mount("/", create_simulator_app()),
        ]
    )
    with serving(app) as server:
        diagnosis = diagnose(server.url + "/v1", "reference", None, timeout=60)
    assert [(r.surface, r.answers, r.detail) for r in diagnosis.surfaces] == [
        (surface, True, "answers") for surface in SURFACES
    ]


def test_an_answer_in_another_api_shape_is_not_an_answer() -> None:
    async def chat_shaped(request: Request) -> JSONResponse:
        return JSONResponse({"choices": []})

    app = Starlette(
        routes=[
            Route("/v1/messages", chat_shaped, methods=["POST"]),
            Mount("/", create_simulator_app()),
        ]
    )
    with serving(app) as server:
        diagnosis = diagnose(server.url + "/v1", "reference", None, timeout=60)
    messages_result = diagnosis.surfaces[1]
    assert not messages_result.answers
    assert messages_result.detail == "answered, but not in this API's shape"


def test_the_bridge_is_recommended_only_over_an_answering_chat_completions() -> None:
    """SPEC §9's bridges go to Chat Completions: without it, no bridge to recommend."""

    def results(*answers: bool) -> list[SurfaceResult]:
        return [
            SurfaceResult(surface, answered, "answers" if answered else "HTTP 404")
            for surface, answered in zip(SURFACES, answers, strict=True)
        ]

    assert upstream_api(results(True, True, True)).value == "same"
    only_responses_missing = upstream_api(results(True, True, False))
    assert only_responses_missing.value == "chat_completions"
    assert "not Responses" in only_responses_missing.why
    no_chat = upstream_api(results(False, True, False))
    assert no_chat.value == "same"
    assert "Chat Completions" in no_chat.why
