"""The node agent's budgets under pytest-benchmark: uevent → slice written, idle CPU,
resident memory. The measuring code is tests/bench/agent_bench.py; precise figures go to
``extra_info`` (the latency from the uevent write to the API server storing the slice, taken from
the server's own clock; the benchmark's own timing adds the test's polling). Nothing here asserts
a time: the budgets are read from the report, not enforced by a timed assert.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.agent.node import is_root

from .agent_bench import DEVICES, Rig, idle_cpu, memory_kib, one_event, start_rig
from .figures import record

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(not is_root(), reason="real uevents need root")]


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    r = start_rig(sized=True)
    try:
        yield r
    finally:
        r.close()


def test_uevent_to_slice_written(benchmark: Any, rig: Rig) -> None:
    latencies: list[float] = []

    def event() -> None:
        latencies.append(one_event(rig))

    rounds = 1 if benchmark.disabled else 10
    benchmark.pedantic(event, rounds=rounds, iterations=1)
    benchmark.extra_info["latency_s"] = [round(x, 4) for x in latencies]
    benchmark.extra_info["latency_median_s"] = round(statistics.median(latencies), 4)
    benchmark.extra_info["budget_s"] = "1.00-1.05"
    if not benchmark.disabled:
        record(benchmark, "agent", "uevent → slice stored, isolated event", latencies, "s",
               budget="1.00–1.05 s")
    # Each isolated event changed the slice exactly once and the agent is still running.
    assert len(latencies) == rounds and all(x > 0 for x in latencies)
    assert rig.proc.poll() is None
    assert len(rig.names()) in (DEVICES + 2, DEVICES + 3)


def test_idle_cpu_and_memory(benchmark: Any, rig: Rig) -> None:
    windows, seconds = (1, 2.0) if benchmark.disabled else (6, 10.0)
    shares: list[float] = []
    per_thread: dict[str, float] = {}
    arrived = 0.0

    def measure() -> None:
        nonlocal arrived
        for _ in range(windows):
            share, came, per = idle_cpu(rig, seconds)
            shares.append(share)
            arrived += came
            for k, v in per.items():
                per_thread[k] = per_thread.get(k, 0.0) + v

    benchmark.pedantic(measure, rounds=1, iterations=1)
    rss, hwm = memory_kib(rig.proc.pid)
    busy = sorted(((k, v) for k, v in per_thread.items() if v > 0), key=lambda kv: -kv[1])
    benchmark.extra_info.update(
        idle_seconds=seconds * windows, idle_cpu_percent=[round(x, 4) for x in shares],
        uevents_from_elsewhere=arrived,
        cpu_ms_by_thread={k: round(v * 1000, 2) for k, v in busy},
        rss_mib=round(rss / 1024, 1), peak_rss_mib=round(hwm / 1024, 1))
    if not benchmark.disabled:
        record(benchmark, "agent", f"idle CPU, plugin serving ({seconds:.0f} s windows)", shares,
               "%", budget="≤ 0.1 % (aim ≤ 0.05 %)",
               note="by thread: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in busy[:4])
               + f" in {seconds * windows:.0f} s; {arrived:.0f} uevents arrived from elsewhere")
        record(benchmark, "agent", "resident memory after start-up (VmRSS)", [rss / 1024],
               "MiB", budget="≤ 50 MiB")
        record(benchmark, "agent", "peak resident memory (VmHWM)", [hwm / 1024], "MiB",
               budget="≤ 55 MiB")
    assert shares and all(x >= 0 for x in shares) and rss > 0 and hwm >= rss
    assert rig.proc.poll() is None


def test_memory_without_the_kubelet_plugin(benchmark: Any) -> None:
    """The same agent with ``--no-plugin``: what the kubelet plugin (grpcio, protobuf, the
    generated stubs and the serving server) adds to the resident set is the difference."""
    r = start_rig(sized=True, extra=("--no-plugin",))
    try:
        time.sleep(1.0 if benchmark.disabled else 5.0)  # past the start-up walks and writes
        rss, _ = benchmark.pedantic(memory_kib, args=(r.proc.pid,), rounds=1, iterations=1)
        assert rss > 0 and r.proc.poll() is None
        if not benchmark.disabled:
            record(benchmark, "agent", "resident memory without the kubelet plugin (VmRSS)",
                   [rss / 1024], "MiB")
    finally:
        r.close()
