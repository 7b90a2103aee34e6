from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any

import pytest

from proxy.config.load import Route, Settings
from proxy.server.app import create_app
from proxy.simulator import SimulatorLog, create_simulator_app
from tests.servers import ServerThread, serving


@pytest.fixture(scope="session")
def sim_log() -> SimulatorLog:
    return SimulatorLog()


@pytest.fixture(scope="session")
def simulator(sim_log: SimulatorLog) -> Iterator[ServerThread]:
    with serving(create_simulator_app(sim_log)) as server:
        yield server


@pytest.fixture()
def log(sim_log: SimulatorLog) -> SimulatorLog:
    sim_log.clear()
    return sim_log


ProxyFactory = Callable[..., AbstractContextManager[ServerThread]]


@pytest.fixture(scope="session")
def make_proxy(simulator: ServerThread) -> ProxyFactory:
    """Start a proxy in front of the simulator (or any upstream) with route overrides."""

    @contextmanager
    def factory(
        upstream: str | None = None, settings: dict[str, Any] | None = None, **route: Any
    ) -> Iterator[ServerThread]:
        base = Route(name="default", upstream=upstream or simulator.url + "/v1")
        app = create_app(Settings(routes=(replace(base, **route),), **(settings or {})))
        with serving(app) as server:
            yield server

    return factory


@pytest.fixture(scope="session")
def proxy(make_proxy: ProxyFactory) -> Iterator[ServerThread]:
    with make_proxy() as server:
        yield server
