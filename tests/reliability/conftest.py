from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.simulator import SimulatorLog, create_simulator_app
from tests.e2e.conftest import log, make_proxy, proxy, sim_log, simulator  # noqa: F401
from tests.servers import ServerThread, serving


@pytest.fixture()
def own_simulator() -> Iterator[tuple[ServerThread, SimulatorLog]]:
    """A simulator of this test's own, so its open connections are this test's alone."""
    own_log = SimulatorLog()
    with serving(create_simulator_app(own_log)) as server:
        yield server, own_log
