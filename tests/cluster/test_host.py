"""The cluster is contained: `down`, and `up` after a killed run, leave the host as it was.

Compared before and after: the mount table, the cgroup hierarchies, every kernel setting outside
net/ (the kubelet changes some), the host's network interfaces and named network namespaces,
the host paths the cluster writes inside its own mount namespace, and the processes running the
cluster's binaries.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from .support import STATE, cluster, info

pytestmark = [pytest.mark.cluster, pytest.mark.own_cluster]


def snapshot() -> dict[str, object]:
    proc = cluster("snapshot")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def pids() -> dict[str, int]:
    return {k: int(v) for k, v in json.loads((STATE / "pids.json").read_text()).items()}


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

    # A killed run: the components die without `down` (SIGKILL, as a timeout would), and the
    # next `up` cleans up after it before it starts.
    for pid in pids().values():
        os.kill(pid, signal.SIGKILL)
    again = cluster("up", timeout=3600)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "removing it first" in again.stderr

    down = cluster("down")
    assert down.returncode == 0, down.stderr
    after = snapshot()
    assert not STATE.exists()
    for key in before:
        assert after[key] == before[key], key
