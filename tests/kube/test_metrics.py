"""The metrics both agents share: the registry, the build, a slice publisher's series."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from liken_devices import __version__
from liken_devices.kube.metrics import SliceMetrics

REPO = Path(__file__).resolve().parents[2]


def _samples(m: SliceMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, content_type = m.exposition()
    assert content_type.startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(body.decode()) for s in f.samples}


def test_shared_series_carry_the_prefix_and_record_what_the_hooks_say() -> None:
    m = SliceMetrics(None, "x_test", "test slice")
    m.api_error("slice", 409)
    m.api_error("slice", None)
    m.published(7, 3)
    s = _samples(m)
    build = [k for k in s if k[0] == "x_test_build_info"]
    assert len(build) == 1 and ("version", __version__) in build[0][1]
    assert s[("x_test_published_devices", ())] == 7
    assert s[("x_test_pool_generation", ())] == 3
    assert s[("x_test_slice_writes_total", ())] == 1
    assert s[("x_test_api_errors_total", (("code", "409"), ("op", "slice")))] == 1
    assert s[("x_test_api_errors_total", (("code", "connection"), ("op", "slice")))] == 1
    assert s[("x_test_last_publish_timestamp_seconds", ())] > 0
    assert any(name == "process_start_time_seconds" for name, _ in s)
    assert not any(name.endswith("_created") for name, _ in s)


def test_each_instance_has_its_own_registry() -> None:
    a, b = SliceMetrics(None, "x_test", "test slice"), SliceMetrics(None, "x_test", "test slice")
    a.published(1, 1)
    assert _samples(b)[("x_test_slice_writes_total", ())] == 0


def test_the_agents_metrics_bring_no_client_library_and_no_http_server() -> None:
    """The node agent runs on every node: its metrics are written by kube/prometheus.py, and
    the port is served by kube/endpoint.py, so neither the client library nor the standard
    library's HTTP server stack is loaded, nor is the library a dependency of the package."""
    code = ("import sys, liken_devices.agent.metrics, liken_devices.media.metrics;"
            "liken_devices.agent.metrics.AgentMetrics().exposition();"
            "print(' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(REPO / "src")}).stdout.split()
    assert "liken_devices.kube.prometheus" in out
    assert not {"prometheus_client", "http.server", "socketserver", "wsgiref"} & set(out)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().startswith("prometheus")]
