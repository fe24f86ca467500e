"""The agent's metrics: the plugin's calls are counted and timed, API errors labelled, the
endpoint serves the agent's own registry and stops at once."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from liken_devices.agent.metrics import AgentMetrics


class _Outcome:
    def __init__(self, error: str) -> None:
        self.error = error


class _Plugin:
    """The two methods the plugin's gRPC servicers call, answering like the real ones."""

    def prepare(self, claims: list[str]) -> dict[str, Any]:
        time.sleep(0.01)
        return {c: _Outcome("gone" if c == "bad" else "") for c in claims}

    def unprepare(self, claims: list[str]) -> dict[str, str]:
        return dict.fromkeys(claims, "")


def sample(m: AgentMetrics, name: str, **labels: str) -> float:
    value = m.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


def test_plugin_calls_are_counted_and_timed() -> None:
    m = AgentMetrics()
    plugin = _Plugin()
    m.instrument_plugin(plugin)
    assert plugin.prepare(["a"])["a"].error == ""
    plugin.prepare(["a", "bad"])
    plugin.unprepare(["a"])
    assert sample(m, "liken_devices_prepare_total", result="ok") == 1
    assert sample(m, "liken_devices_prepare_total", result="error") == 1
    assert sample(m, "liken_devices_unprepare_total", result="ok") == 1
    assert sample(m, "liken_devices_prepare_duration_seconds_count") == 2
    assert sample(m, "liken_devices_prepare_duration_seconds_sum") >= 0.02
    with m.timed_unprepare():
        pass
    assert sample(m, "liken_devices_unprepare_duration_seconds_count") == 2


def test_api_errors_and_publishes() -> None:
    m = AgentMetrics()
    m.api_error("slice", 409)
    m.api_error("slice", None)
    m.published(5, 7)
    assert sample(m, "liken_devices_api_errors_total", op="slice", code="409") == 1
    assert sample(m, "liken_devices_api_errors_total", op="slice", code="connection") == 1
    assert sample(m, "liken_devices_published") == 5
    assert sample(m, "liken_devices_pool_generation") == 7
    assert abs(sample(m, "liken_devices_last_publish_timestamp_seconds") - time.time()) < 5


def test_endpoint_serves_and_stops() -> None:
    m = AgentMetrics()
    m.uevents.inc(3)
    server = m.serve(0, "127.0.0.1")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics",
                                      timeout=5).read().decode()
        assert "liken_devices_uevents_total 3.0" in body
    finally:
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2
