"""A surge upgrade on one node: two ``liken-devices run --seamless-upgrade`` processes listen on
the same metrics address and port; while both do, the newer answers every connection (so the
kubelet's probe of the new pod reads the new agent), and either answers alone; outside the mode
a busy port is still one line and exit 2 (docs/plugin.md, "Upgrades"; docs/agent.md, "Metrics
and health")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.loopback import free_port
from tests.support.loopback import get as fetch

from .node import FixtureNode

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def started_at(port: int) -> float:
    """Which process answered: the process collector's start time (distinct per process)."""
    status, text = fetch(port, "/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith("process_start_time_seconds "):
            return float(line.split()[1])
    raise AssertionError("no process_start_time_seconds in /metrics")


class Agent:
    def __init__(self, node: FixtureNode, port: int, log: Path, seamless: bool = True,
                 uid: str = "", env: dict[str, str] | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        args = [sys.executable, "-m", "liken_devices.cli", "run", "--node", "n1", *node.args(),
                "--no-api", "--no-plugin", "--no-machine-side", "--metrics-port", str(port),
                "--metrics-addr", "127.0.0.1", "-v", *extra]
        if seamless:
            args.append("--seamless-upgrade")
        environ = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO / "src"), "POD_UID": uid}
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=out, env=environ)

    def healthy_start(self, port: int) -> float:
        """Wait until this very process answers /healthz with 200; its start time."""
        mine = process_start(self.proc.pid)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if fetch(port, "/healthz")[0] == 200 and same(started_at(port), mine):
                    return mine
            except OSError:
                pass
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.05)

    def term(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(20)

    def ensure_dead(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def same(a: float, b: float) -> bool:
    """Two start times are one process's (the collector's resolution is a clock tick)."""
    return abs(a - b) < 1e-3


def process_start(pid: int) -> float:
    """A process's start time as the process collector reports it (proc(5): boot time plus
    the 22nd field of /proc/PID/stat in clock ticks)."""
    ticks = os.sysconf("SC_CLK_TCK")
    stat = Path(f"/proc/{pid}/stat").read_text()
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime "))
    return float(stat.rsplit(")", 1)[1].split()[19]) / ticks + boot


def test_two_seamless_agents_share_the_port_and_the_newer_answers(tmp_path: Path) -> None:
    node = FixtureNode(tmp_path / "node")
    port = free_port()
    old = Agent(node, port, tmp_path / "old.log", uid="3f6a1c2e-0000-4000-8000-00000000a01d")
    new: Agent | None = None
    try:
        old_start = old.healthy_start(port)
        # Outside the mode the busy port is an error: one line, exit 2, and the old one serves on.
        accident = subprocess.run(
            [sys.executable, "-m", "liken_devices.cli", "run", "--node", "n1", *node.args(),
             "--no-api", "--no-plugin", "--no-machine-side", "--metrics-port", str(port),
             "--metrics-addr", "127.0.0.1"],
            capture_output=True, text=True, timeout=60,
            env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
        assert accident.returncode == 2, accident.stderr
        assert accident.stderr.strip().splitlines() == [
            f"liken-devices: cannot listen on 127.0.0.1:{port}: the port is in use by another "
            "process (another agent on this node?)"]
        assert same(started_at(port), old_start)

        # The surge pod binds the same address and port; from then on it answers everything,
        # probes and scrapes alike, and both stay up.
        new = Agent(node, port, tmp_path / "new.log", uid="9b2d4e6f-0000-4000-8000-00000000ee01")
        new_start = new.healthy_start(port)
        assert not same(new_start, old_start)
        for _ in range(30):
            assert same(started_at(port), new_start)
            assert fetch(port, "/healthz")[0] == 200
            assert fetch(port, "/readyz")[0] == 200
        assert old.proc.poll() is None and new.proc.poll() is None

        # A new pod that goes away (a failed rollout) hands the port back to the old one...
        assert new.term() == 0
        assert same(started_at(port), old_start) and fetch(port, "/healthz")[0] == 200
        # ...and in the upgrade that completes, the old one ends and the new one answers alone.
        new = Agent(node, port, tmp_path / "new2.log", uid="c0ffee00-0000-4000-8000-000000000003")
        new_start = new.healthy_start(port)
        assert old.term() == 0
        for _ in range(10):
            assert same(started_at(port), new_start)
            assert fetch(port, "/healthz")[0] == 200
        assert new.term() == 0
    finally:
        old.ensure_dead()
        if new is not None:
            new.ensure_dead()


def test_a_stop_signal_the_kernel_hands_to_another_thread_still_stops_the_agent(
        tmp_path: Path) -> None:
    """SIGTERM sent to one of the agent's other threads (tgkill), as the kernel may deliver a
    process's signal: the main loop, asleep in select, still wakes and stops at once."""
    import ctypes

    node = FixtureNode(tmp_path / "node")
    port = free_port()
    agent = Agent(node, port, tmp_path / "agent.log", seamless=False)
    try:
        agent.healthy_start(port)
        pid = agent.proc.pid
        others = [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]
        assert others, "the agent runs its endpoint on a thread of its own"
        libc = ctypes.CDLL(None, use_errno=True)
        sys_tgkill = 234  # x86_64; aarch64 is 131
        if os.uname().machine == "aarch64":
            sys_tgkill = 131
        assert libc.syscall(sys_tgkill, pid, others[0], signal.SIGTERM) == 0
        assert agent.proc.wait(10) == 0, agent.log.read_text()
    finally:
        agent.ensure_dead()
