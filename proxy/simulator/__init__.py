"""The built-in simulated provider: a quirky OpenAI-compatible upstream.

It is the demo default, the test double of the end-to-end tests and the benchmark upstream.
The request's `model` picks a profile (see `profiles.PROFILES`).
"""

from proxy.simulator.app import SimulatedReset, SimulatorLog, create_simulator_app
from proxy.simulator.profiles import PROFILES, Profile, profile_for_model

__all__ = [
    "PROFILES",
    "Profile",
    "SimulatedReset",
    "SimulatorLog",
    "create_simulator_app",
    "profile_for_model",
]
