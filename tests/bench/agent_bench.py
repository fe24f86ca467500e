"""Benchmarks of the whole node agent: uevent → slice latency, idle CPU, memory.

The agent runs as it does on a node: ``liken-devices run`` in its own process, with the kubelet
plugin and the machine side embedded and the metrics endpoint up, against the loopback API
server, walking a fixture tree of ``DEVICES`` devices while the uevents are the real kernel's.

* latency: a dongle is plugged into (or pulled out of) the fixture tree, one synthetic uevent is
  written, and the time from that write to the API server storing the changed slice is taken
  (budget 1.00–1.05 s for an isolated event: the one quiet second, then walk and write);
* idle CPU: the process's user+system time over a quiet window, as a share of one CPU
  (budget ≤ 0.1 %); uevents from elsewhere on the machine during the window are counted and
  reported, since they make walks that are not idleness;
* memory: the agent's resident set (VmRSS) and its peak (VmHWM), children included
  (budgets ≤ 50 MiB resident, ≤ 55 MiB peak, on the node-sized setup of ``start_rig(sized=True)``).

Run ``python -m tests.bench.agent_bench [--idle SECONDS] [--events N]`` (as root) for a report;
tests/bench/test_agent_bench.py runs the same code under pytest-benchmark.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.agent.node import FixtureNode, synthetic_uevent
from tests.support.fakeapi import FakeApiServer
from tests.support.loopback import free_port

REPO = Path(__file__).resolve().parents[2]
DEVICES = 20  # dongles in the fixture tree, besides the GPU's two devices
NODE = "bench-agent"


@dataclass
class Rig:
    root: Path
    api: FakeApiServer
    node: FixtureNode
    proc: subprocess.Popen[bytes]
    metrics_port: int
    next_port: int = DEVICES + 1
    plugged: list[int] = field(default_factory=list)

    @property
    def slice_name(self) -> str:
        return f"{NODE}-liken.sh"

    def names(self) -> list[str]:
        obj = self.api.get_object("resourceslices", self.slice_name)
        return [d["name"] for d in (obj or {}).get("spec", {}).get("devices") or []]

    def metric(self, name: str) -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                      timeout=5).read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.api.stop()


def one_ca(root: Path) -> Path | None:
    """A self-signed cluster CA made with openssl, as a service account carries one (None
    without openssl)."""
    ca = root / "ca.crt"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                           "-keyout", str(root / "ca.key"), "-out", str(ca), "-days", "30",
                           "-subj", "/CN=kubernetes"], capture_output=True, check=False)
    return ca if made.returncode == 0 else None


def node_sized(root: Path, kubeconfig: Path) -> tuple[str, ...]:
    """A real node's catalogs and credentials: the system's hwdata, a distribution-sized module
    tree, and a kubeconfig naming one cluster CA, as a pod's service account has (without one,
    the API client loads the system's whole CA store, which no in-cluster agent does)."""
    from tests.bench.test_machine_apply import big_tree

    extra: tuple[str, ...] = ("--modules-dir", str(big_tree(root / "big-modules")))
    for hwdata in (Path("/usr/share/hwdata"), Path("/usr/share/misc")):
        if (hwdata / "pci.ids").is_file():
            extra += ("--hwdata-dir", str(hwdata))
            break
    ca = one_ca(root)
    if ca is not None:
        config = yaml.safe_load(kubeconfig.read_text())
        config["clusters"][0]["cluster"]["certificate-authority"] = str(ca)
        kubeconfig.write_text(yaml.safe_dump(config))
    return extra


def daemonset_env() -> dict[str, str]:
    """The literal environment the DaemonSet gives the agent's container (PYTHONOPTIMIZE...)."""
    ds = yaml.safe_load((REPO / "deploy/liken-devices/daemonset.yaml").read_text())
    out: dict[str, str] = {}
    for container in ds["spec"]["template"]["spec"]["containers"]:
        if container["name"] == "liken-devices":
            out.update({e["name"]: str(e["value"]) for e in container.get("env", [])
                        if "value" in e})
    return out


def start_rig(root: Path | None = None, extra: tuple[str, ...] = (),
              sized: bool = False) -> Rig:
    root = root or Path(tempfile.mkdtemp(prefix="lkab-", dir="/tmp"))
    node = FixtureNode(root / "node")
    for port in range(1, DEVICES + 1):
        node.plug_usb(port)
    api = FakeApiServer().start()
    api.add_node(NODE)
    api.add_machine(NODE, {})
    port = free_port()
    kubeconfig = api.write_kubeconfig(root / "kubeconfig")
    if sized:
        extra = (*node_sized(root, kubeconfig), *extra)
    # The console script's way in (liken_devices.entry), as the DaemonSet starts the agent.
    args = [sys.executable, "-m", "liken_devices.entry", "run", "--node", NODE, *node.args(),
            "--kubeconfig", str(kubeconfig),
            "--console", str(root / "console"), "--metrics-port", str(port),
            "--metrics-addr", "127.0.0.1", "--cdi-dir", str(root / "cdi"),
            "--state-dir", str(root / "state"), "--plugin-dir", str(root / "plugin"),
            "--registry-dir", str(root / "registry"), *extra]
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    if sized:  # as deployed
        env.update(daemonset_env())
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    log = open(root / "agent.log", "wb")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(args, stdout=log, stderr=log, env=env)
    rig = Rig(root, api, node, proc, port)
    api.wait_for(lambda: len(rig.names()) == DEVICES + 2, 60)
    rig.api.wait_for(lambda: _metrics_up(rig), 10)
    return rig


def _metrics_up(rig: Rig) -> bool:
    try:
        rig.metric("liken_devices_published_devices")
        return True
    except OSError:
        return False


def one_event(rig: Rig, settle: float = 2.5) -> float:
    """Plug or pull one dongle, write one uevent; seconds until the API stored the new slice."""
    time.sleep(settle)  # isolated: no burst is pending
    if rig.plugged:
        port = rig.plugged.pop()
        rig.node.unplug_usb(port)
        want_len = len(rig.names()) - 1
    else:
        port = rig.next_port
        rig.node.plug_usb(port)
        rig.plugged.append(port)
        want_len = len(rig.names()) + 1
    before = len(rig.api.changes)
    started = time.monotonic()
    synthetic_uevent("add" if want_len > len(rig.names()) else "remove")
    rig.api.wait_for(lambda: len(rig.names()) == want_len, 10)
    for at, plural, _kind, name in rig.api.changes[before:]:
        if plural == "resourceslices" and name == rig.slice_name:
            return at - started
    raise AssertionError("the slice changed without a recorded write")


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of the process, in nanoseconds' resolution.

    /proc/PID/task/TID/schedstat's first field is the time the thread ran (the scheduler's
    account, not the 10 ms ticks of /proc/PID/stat, too coarse for a 0.1 % budget).
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # a thread that just ended
    return total / 1e9


def thread_cpu(pid: int) -> dict[str, float]:
    """Seconds of CPU per thread name (comm), to see who spends the idle budget."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            ns = int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
        out[comm] = out.get(comm, 0.0) + ns / 1e9
    return out


def idle_cpu(rig: Rig, seconds: float) -> tuple[float, float, dict[str, float]]:
    """(CPU share in percent over ``seconds`` of quiet, uevents that arrived meanwhile, CPU
    seconds per thread name)."""
    time.sleep(2.0)  # let any pending burst end
    uevents = rig.metric("liken_devices_uevents_total")
    time.sleep(0.5)
    per0 = thread_cpu(rig.proc.pid)
    cpu0, t0 = cpu_seconds(rig.proc.pid), time.monotonic()
    time.sleep(seconds)
    cpu1, t1 = cpu_seconds(rig.proc.pid), time.monotonic()
    per1 = thread_cpu(rig.proc.pid)
    # The scrapes before and after cost the agent a little CPU too; they are outside the window.
    arrived = rig.metric("liken_devices_uevents_total") - uevents
    per = {k: v - per0.get(k, 0.0) for k, v in per1.items()}
    return 100.0 * (cpu1 - cpu0) / (t1 - t0), arrived, per


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB of the process plus its live children."""
    rss = hwm = 0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "VmRSS":
                rss += int(value.split()[0])
            elif key == "VmHWM":
                hwm += int(value.split()[0])
    return rss, hwm


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=10, help="isolated uevents to time")
    p.add_argument("--idle", type=float, default=60.0, help="seconds of idle to measure")
    p.add_argument("--no-plugin", action="store_true", help="leave the kubelet plugin out")
    p.add_argument("--hwdata-dir", default=None,
                   help="the system's pci.ids/usb.ids instead of empty catalogs (a real node's "
                        "memory: the parsed ID databases are resident)")
    a = p.parse_args(argv)
    extra: tuple[str, ...] = ("--no-plugin",) if a.no_plugin else ()
    if a.hwdata_dir:
        extra += ("--hwdata-dir", a.hwdata_dir)  # read where the first has none
    rig = start_rig(extra=extra)
    try:
        latencies = [one_event(rig) for _ in range(a.events)]
        share, arrived, per = idle_cpu(rig, a.idle)
        rss, hwm = memory_kib(rig.proc.pid)
        walks = rig.metric("liken_devices_walks_total")
        print(f"uevent -> slice written, {len(latencies)} isolated events: "
              f"min {min(latencies):.3f} s, median {statistics.median(latencies):.3f} s, "
              f"max {max(latencies):.3f} s (budget 1.00-1.05 s)")
        print(f"idle CPU over {a.idle:.0f} s: {share:.4f} % of one CPU (budget <= 0.1 %); "
              f"{arrived:.0f} uevents arrived from elsewhere meanwhile")
        busy = sorted(per.items(), key=lambda kv: -kv[1])[:4]
        print("  by thread: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in busy))
        print(f"resident memory: {rss / 1024:.1f} MiB now, peak {hwm / 1024:.1f} MiB "
              f"(budgets <= 50 MiB resident, <= 55 MiB peak); {walks:.0f} walks in all, "
              f"{DEVICES + 2} devices published")
    finally:
        rig.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
