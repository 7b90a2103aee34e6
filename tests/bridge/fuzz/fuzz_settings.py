"""Hypothesis settings for the bridge fuzz tests: bounded and derandomized, so CI runs the same
examples every time (BRIDGE_FUZZ_EXAMPLES=2000 and BRIDGE_FUZZ_RANDOM=1 for a deeper local
hunt with fresh examples)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("BRIDGE_FUZZ_EXAMPLES", "100"))
RANDOM = os.environ.get("BRIDGE_FUZZ_RANDOM") == "1"

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
