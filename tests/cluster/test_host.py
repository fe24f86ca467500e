"""The cluster is contained: `down`, and `up` after a killed run, leave the host as it was.

Compared before and after: the mount table, the cgroup hierarchies, every kernel setting outside
net/ (the kubelet changes some), the host's network interfaces and named network namespaces,
the host paths the cluster writes inside its own mount namespace, and the processes running the
cluster's binaries.

And it signals only its own processes: a `sleep` of the test's own, outside the cluster, planted
in pids.json as a component whose pid was handed out again, survives `restart`, `up` after a
killed run and `down`; a kernel setting another program changes while the cluster runs
(vm.nr_hugepages) is left as that program set it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from .support import STATE, cluster, info, keep_logs

pytestmark = [pytest.mark.cluster, pytest.mark.own_cluster]


def snapshot() -> dict[str, object]:
    proc = cluster("snapshot")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def pids() -> dict[str, int]:
    return {k: int(v["pid"] if isinstance(v, dict) else v)
            for k, v in json.loads((STATE / "pids.json").read_text()).items()}


def start_time(pid: int) -> int:
    # Field 22 of /proc/PID/stat, the 20th after the comm's last ")".
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])


def plant(name: str, pid: int, start: int, command: list[str] | None = None) -> None:
    """Write ``pid`` into pids.json as component ``name``'s, in the file's own format: the bare
    number (an older cluster.py), else a component's record with ``start`` as its start time."""
    path = STATE / "pids.json"
    records = json.loads(path.read_text())
    model = next(v for v in records.values())
    records[name] = pid if isinstance(model, int) else {**model, "pid": pid, "start": start}
    path.write_text(json.dumps(records))
    if command is not None:
        commands = json.loads((STATE / "commands.json").read_text())
        (STATE / "commands.json").write_text(json.dumps({**commands, name: command}))


HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


def test_up_down_and_a_killed_run_leave_the_host_as_it_was() -> None:
    if cluster("status").returncode == 0:
        pytest.fail("a cluster is already running: this test needs to start its own "
                    "(./tasks cluster down first)")
    if STATE.exists():
        # What a killed run left (a machine that stopped with the cluster up keeps its mounts
        # and changed kernel settings, not its processes): `down` is the remedy for it, and the
        # host as it was is the host after that.
        left = cluster("down")
        assert left.returncode == 0, left.stderr
        assert not STATE.exists()
    before = snapshot()
    assert not [m for m in before["mounts"] if m.startswith(str(STATE))], before["mounts"]
    hugepages = HUGEPAGES.read_text()
    # Jobs of someone else's that got pids the cluster's records name.
    others = [subprocess.Popen(["sleep", "1200"]) for _ in range(2)]
    problems: list[str] = []
    try:
        up = cluster("up", timeout=3600)
        assert up.returncode == 0, up.stderr[-4000:]
        assert up.stdout.strip().splitlines()[-1] == f"KUBECONFIG={info()['kubeconfig']}"
        during = snapshot()
        assert during["processes"], "the cluster's processes run"
        assert any("liken-k8s" in c for c in during["cgroups"]), during["cgroups"]
        # The cluster's network and mounts stay inside its namespaces.
        assert during["links"] == before["links"]
        assert during["mounts"] == sorted(set(before["mounts"]) | {f"{STATE}/ns ext4",
                                                                   f"{STATE}/ns/mnt nsfs",
                                                                   f"{STATE}/ns/net nsfs"}) or \
            {m for m in during["mounts"] if not m.startswith(str(STATE))} == set(before["mounts"])

        # `restart` stops the component its record names, and starts it again in the cluster.
        scheduler = pids()["kube-scheduler"]
        started = start_time(scheduler)
        restart = cluster("restart", "kube-scheduler")
        assert restart.returncode == 0, restart.stderr
        with contextlib.suppress(OSError):  # gone, or its pid someone else's by now
            # A zombie (nothing may reap the components' orphans here) has ended.
            fields = Path(f"/proc/{scheduler}/stat").read_text().rpartition(")")[2].split()
            assert fields[0] in "ZX" or int(fields[19]) != started, "the old scheduler runs"
        assert pids()["kube-scheduler"] != scheduler
        if ":/liken-k8s" not in Path(f"/proc/{pids()['kube-scheduler']}/cgroup").read_text():
            problems.append("the restarted scheduler is not in the cluster's cgroup")

        # `restart` of a component whose recorded pid now belongs to another job (another start
        # time): that job lives on, and the component starts again.
        plant("decoy", others[0].pid, start_time(others[0].pid) + 1, ["sleep", "1200"])
        restart = cluster("restart", "decoy")
        if others[0].poll() is not None:
            problems.append(f"restart signalled pid {others[0].pid}, not the component's")
        assert restart.returncode == 0, restart.stderr
        components = pids()

        # A killed run: the components die without `down` (SIGKILL, as a timeout would), and
        # the next `up` cleans up after it before it starts. The kubelet's pid is taken by
        # another job meanwhile, with the very start time recorded, but outside the cluster.
        for pid in components.values():
            os.kill(pid, signal.SIGKILL)
        plant("kubelet", others[1].pid, start_time(others[1].pid))
        again = cluster("up", timeout=3600)
        assert again.returncode == 0, again.stderr[-4000:]
        assert "removing it first" in again.stderr
        for other in others:
            if other.poll() is not None:
                problems.append(f"up after a killed run signalled pid {other.pid}")

        # Another program sets a kernel setting while the cluster runs: down leaves it so.
        HUGEPAGES.write_text(str(int(hugepages) + 1))
        theirs = HUGEPAGES.read_text()
        down = cluster("down")
        assert down.returncode == 0, down.stderr
        if HUGEPAGES.read_text() != theirs:
            problems.append(f"down set vm.nr_hugepages from {theirs.strip()} back to "
                            f"{HUGEPAGES.read_text().strip()}")
        for other in others:
            if other.poll() is not None:
                problems.append(f"down signalled pid {other.pid}")
        assert not problems, problems
    except BaseException:
        if STATE.exists():  # down below removes them: keep what the cluster saw
            print(keep_logs("tests/cluster/test_host.py::test_up_down_and_a_killed_run"))
        raise
    finally:
        HUGEPAGES.write_text(hugepages)
        for other in others:
            other.kill()
            other.wait()
        if STATE.exists():
            cluster("down")
    after = snapshot()
    assert not STATE.exists()
    for key in before:
        assert after[key] == before[key], key
