"""One canned upstream and one real proxy in front of it per test module (both uvicorn on
127.0.0.1, as users run the proxy), and the SDK clients pointed at each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.differential.canned import CannedUpstream
from tests.differential.harness import Bench, anthropic_clients, openai_clients
from tests.e2e.conftest import ProxyFactory, make_proxy, sim_log, simulator  # noqa: F401
from tests.servers import serving


@pytest.fixture(scope="module")
def bench(make_proxy: ProxyFactory) -> Iterator[Bench]:  # noqa: F811
    upstream = CannedUpstream()
    with serving(upstream) as server, make_proxy(upstream=server.url + "/v1") as proxy:
        yield Bench(
            upstream,
            openai_clients(server.url, proxy.url),
            anthropic_clients(server.url, proxy.url),
        )
