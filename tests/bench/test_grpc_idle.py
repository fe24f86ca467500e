"""What grpcio costs an idle node, and whether its settings change that.

The agent's own threads sleep with no timeout when idle; what is left of its idle CPU is
grpcio's (tests/bench/test_agent_bench.py gives it by thread). Here a bare grpcio server of the
plugin's shape runs alone, once per setting: grpcio's defaults; the deallocation check the agent
lengthens; each poll strategy (``GRPC_POLL_STRATEGY``); fork support off; HTTP/2 keepalive
pings off. The figures say which settings matter (docs/performance.md, "Idle CPU and grpcio").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .agent_bench import cpu_seconds, thread_cpu
from .figures import record

REPO = Path(__file__).resolve().parents[2]
LONG = {"LIKEN_BENCH_LONG_CHECK": "1"}
SETTINGS: tuple[tuple[str, dict[str, str]], ...] = (
    ("grpcio's defaults", {}),
    ("deallocation check once an hour (as the agent runs)", LONG),
    ("… and GRPC_POLL_STRATEGY=poll", {**LONG, "GRPC_POLL_STRATEGY": "poll"}),
    ("… and GRPC_POLL_STRATEGY=epoll1", {**LONG, "GRPC_POLL_STRATEGY": "epoll1"}),
    ("… and GRPC_ENABLE_FORK_SUPPORT=0", {**LONG, "GRPC_ENABLE_FORK_SUPPORT": "0"}),
    ("… and no HTTP/2 keepalive pings", {**LONG, "LIKEN_BENCH_GRPC_OPTIONS":
                                         "grpc.keepalive_time_ms=2147483647,"
                                         "grpc.http2.max_pings_without_data=0"}),
)


def idle_share(env: dict[str, str], seconds: float, windows: int) -> tuple[list[float], str]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.bench.grpc_idle_server"], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src"), **env},
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        shares: list[float] = []
        before = thread_cpu(proc.pid)
        for _ in range(windows):
            c0, t0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(seconds)
            shares.append(100.0 * (cpu_seconds(proc.pid) - c0) / (time.monotonic() - t0))
        after = thread_cpu(proc.pid)
        busy = sorted(((k, v - before.get(k, 0.0)) for k, v in after.items()),
                      key=lambda kv: -kv[1])[:3]
        spent = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in busy if v > 0)
        return shares, f"by thread over {seconds * windows:.0f} s: {spent}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.mark.benchmark(group="grpc-idle")
def test_grpcio_idle_by_setting(benchmark: Any) -> None:
    seconds, windows = (0.5, 1) if benchmark.disabled else (10.0, 3)
    results: list[tuple[str, list[float], str]] = []

    def measure() -> None:
        for label, env in SETTINGS:
            shares, note = idle_share(env, seconds, windows)
            results.append((label, shares, note))

    benchmark.pedantic(measure, rounds=1, iterations=1)
    assert len(results) == len(SETTINGS) and all(s and min(s) >= 0 for _, s, _ in results)
    if not benchmark.disabled:
        for label, shares, note in results:
            record(benchmark, "grpc-idle", label, shares, "%", budget="aim ≤ 0.05 %", note=note)
