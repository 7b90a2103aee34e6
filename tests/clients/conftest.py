"""The end-to-end fixtures, shared: a real simulator and proxy on loopback (tests/e2e)."""

from tests.e2e.conftest import log, make_proxy, proxy, sim_log, simulator

__all__ = ["log", "make_proxy", "proxy", "sim_log", "simulator"]
