"""A surge upgrade's endpoint hand-over: how long after its exec the new agent takes over the
node's metrics port from the old one (docs/plugin.md, "Upgrades"); until then scrapes read the old
agent. The probes do not go through the port: they are exec probes over each pod's own unix
socket, and what one costs is measured here too (the DaemonSet's command, the console script's
short way).

An old ``liken-devices run --seamless-upgrade`` listens; a new one is started again and again
with the DaemonSet's environment (PYTHONOPTIMIZE...), and the port is polled until the process
that answers is the new one (its start time in /metrics), then until the new one's /healthz is
200 (its first walk done). Wall time, from just before the exec. Nothing here asserts a time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agent.node import FixtureNode
from tests.agent.test_surge import Agent, fetch, free_port, process_start, same, started_at

from .agent_bench import daemonset_env
from .figures import Run, record, run_process

pytestmark = pytest.mark.slow

RUNS = 8


def _answered_by(port: int, pid: int, deadline: float) -> None:
    mine = process_start(pid)
    while time.monotonic() < deadline:
        try:
            if same(started_at(port), mine):
                return
        except (OSError, AssertionError):
            pass
        time.sleep(0.002)
    raise AssertionError("the new agent never took the port over")


def _healthy(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        if fetch(port, "/healthz")[0] == 200:
            return
        time.sleep(0.005)
    raise AssertionError("the new agent never became healthy")


@pytest.mark.benchmark(group="surge")
def test_the_new_agent_takes_the_port_over(benchmark: Any, tmp_path: Path) -> None:
    node = FixtureNode(tmp_path / "node")
    port = free_port()
    # As deployed; the bytecode cache allowed (an image carries compiled modules).
    env = {**daemonset_env(), "PYTHONDONTWRITEBYTECODE": ""}
    old = Agent(node, port, tmp_path / "old.log", uid="3f6a1c2e-0000-4000-8000-00000000a01d",
                env=env)
    listening: list[float] = []
    healthy: list[float] = []
    try:
        old.healthy_start(port)

        def once(i: int) -> None:
            t0 = time.monotonic()
            new = Agent(node, port, tmp_path / f"new{i}.log",
                        uid=f"9b2d4e6f-0000-4000-8000-{i:012d}", env=env)
            try:
                _answered_by(port, new.proc.pid, t0 + 60)
                listening.append(time.monotonic() - t0)
                _healthy(port, t0 + 60)
                healthy.append(time.monotonic() - t0)
            finally:
                assert new.term() == 0
            old.healthy_start(port)  # the old one answers again

        def measure() -> None:
            once(0)  # writes the bytecode cache, as an installed image has it
            listening.clear()
            healthy.clear()
            for i in range(1, (2 if benchmark.disabled else RUNS + 1)):
                once(i)

        benchmark.pedantic(measure, rounds=1, iterations=1)
    finally:
        old.ensure_dead()
    assert listening and healthy and all(a <= b for a, b in zip(listening, healthy, strict=True))
    if benchmark.disabled:
        return
    record(benchmark, "surge", "exec → the new agent answers the shared port", listening, "s")
    record(benchmark, "surge", "exec → its /healthz is 200 (first walk done)", healthy, "s")


# The DaemonSet's probes: exec probes, each a process started in the container, the console
# script's `liken-devices probe --socket=... /healthz` (the runtime's own exec cost comes on top
# and is not measured here); at the DaemonSet's periods (liveness every 20 s, readiness every
# 10 s) that is 0.15 processes a second on every node.
PROBES_PER_SECOND = 1 / 20 + 1 / 10


@pytest.mark.benchmark(group="surge")
def test_an_exec_probe_costs(benchmark: Any, tmp_path: Path) -> None:
    node = FixtureNode(tmp_path / "node")
    port = free_port()
    sock = tmp_path / "probe.sock"
    agent = Agent(node, port, tmp_path / "agent.log", uid="3f6a1c2e-0000-4000-8000-00000000a01d",
                  extra=("--probe-socket", str(sock)))
    runs: list[Run] = []
    try:
        agent.healthy_start(port)
        script = Path(sys.executable).parent / "liken-devices"
        argv = [str(script), "probe", f"--socket={sock}", "/healthz"]

        def measure() -> None:
            runs.extend(run_process(argv) for _ in range(3 if benchmark.disabled else RUNS * 2))

        benchmark.pedantic(measure, rounds=1, iterations=1)
    finally:
        agent.ensure_dead()
    assert runs and all(r.code == 0 for r in runs)
    if benchmark.disabled:
        return
    record(benchmark, "surge", "an exec probe's process (liken-devices probe), CPU",
           [r.cpu * 1e3 for r in runs], "ms")
    record(benchmark, "surge", "exec probes at the DaemonSet's periods, CPU per node",
           [r.cpu * 1e3 * PROBES_PER_SECOND for r in runs], "ms/s",
           budget="the agent's whole idle budget: ≤ 1 ms/s (0.1 %)",
           note="the container runtime's exec not included")
