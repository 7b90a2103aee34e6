from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.simulator import SimulatorLog, create_simulator_app
from tests.servers import ServerThread, serving


@pytest.fixture(scope="session")
def doctor_sim_log() -> SimulatorLog:
    return SimulatorLog()


@pytest.fixture(scope="session")
def provider(doctor_sim_log: SimulatorLog) -> Iterator[ServerThread]:
    """The simulated provider on loopback: the doctor's real upstream in these tests."""
    with serving(create_simulator_app(doctor_sim_log)) as server:
        yield server


@pytest.fixture()
def sim_log(doctor_sim_log: SimulatorLog) -> SimulatorLog:
    doctor_sim_log.clear()
    return doctor_sim_log
