"""The doctor pointed at the proxy in front of each quirky profile: what is left to report.

Everything the doctor names directly at the provider (test_profiles.py) is gone behind the
proxy with its default settings, except what the proxy passes through on purpose (SSE comments,
which non-JSON data lines also become). A replay loop ends as the proxy's own loop_detected
error, which the report shows as an incomplete turn, not as a provider that forgot to finish
its stream.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.config.load import Route, Settings
from proxy.doctor.diagnose import diagnose
from proxy.server.app import create_app
from tests.doctor.test_profiles import EXPECTED
from tests.servers import ServerThread, serving

PASSED_THROUGH = {
    "fault-garbage": {"keep_alives"},
    # The same call under a fresh id is a legitimate re-run (SPEC §5): it passes. The repeat
    # guard (SPEC §10) acts from a run of 3 identical results, past the doctor's few rounds.
    "repeat-forever": {"replay"},
    "poll-until-done": {"replay"},
}
LOOPS = {"replay-loop", "replay-loop-restarted", "replay-loop-chatty"}
# A broken line inside every streamed call: each stream ends with the proxy's error event
# (SPEC §4), and what the doctor makes of the calls cut short is not a quirk to report.
BROKEN_IN_CALL = {"fault-garbage-in-call"}
# A looping model that writes text before its replays: the stream had begun (SPEC §5).
IN_STREAM = {"replay-loop-chatty"}


@pytest.fixture(scope="module")
def proxy(provider: ServerThread) -> Iterator[ServerThread]:
    route = Route(name="default", upstream=provider.url + "/v1")
    with serving(create_app(Settings(routes=(route,)))) as server:
        yield server


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_behind_the_proxy_nothing_is_left_to_report(proxy: ServerThread, profile: str) -> None:
    diagnosis = diagnose(proxy.url + "/v1", profile, None, timeout=60)
    if profile in BROKEN_IN_CALL:
        whys = dict(diagnosis.incomplete)
        assert whys and all(label.startswith("streaming") for label in whys)
        broken = "the stream ended with an error event: the upstream sent a line that is not JSON"
        assert all(why.startswith(broken) for why in whys.values()), whys
        return
    assert {f.quirk.code for f in diagnosis.findings} == PASSED_THROUGH.get(profile, set())
    if profile not in LOOPS:
        assert diagnosis.responses == 6 and diagnosis.incomplete == []
        return
    # The loop is stopped with a 422, streaming too when the looping model sends nothing
    # before its replays: the loop shows before the stream's first byte (SPEC §5).
    whys = dict(diagnosis.incomplete)
    streamed = next(why for label, why in whys.items() if label.startswith("streaming"))
    whole = next(why for label, why in whys.items() if label.startswith("non-streaming"))
    in_stream = "the stream ended with an error event: "
    stream_form = in_stream if profile in IN_STREAM else "HTTP 422: "
    assert streamed.startswith(stream_form + "Tool-call replay loop detected")
    assert whole.startswith("HTTP 422: Tool-call replay loop detected")
