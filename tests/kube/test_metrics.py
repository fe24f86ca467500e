"""The metrics both agents share: the registry, the build, a slice publisher's series."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from liken_devices import __version__
from liken_devices.kube.metrics import SliceMetrics


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
