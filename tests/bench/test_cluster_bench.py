"""What the real cluster costs (scripts/cluster): building its binaries from the Go module proxy
cold (empty module, build and binary caches: what a fresh machine pays) and warm (the Go caches
kept, the binaries built again), and bringing the node up to Ready and down again.

Minutes to tens of minutes of work, so it runs under `./tasks bench` only (`-k cluster`); the
cold build uses caches of its own and leaves the machine's alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .figures import record

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts" / "cluster"


def timed(cmd: list[str], env: dict[str, str], timeout: float) -> float:
    start = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return time.monotonic() - start


needs_go = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("go") is None,
                              reason="builds Kubernetes as root with Go")


def listed_versions() -> dict[str, str]:
    """versions.env's KEY=VALUE lines (the oldest and newest Kubernetes minor among them)."""
    pairs = (line.split("=", 1) for line in (CLUSTER / "versions.env").read_text().splitlines()
             if "=" in line and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


@pytest.mark.root
@needs_go
@pytest.mark.timeout(10800)
def test_cluster_build(benchmark: Any, tmp_path: Path) -> None:
    """Cold: everything the oldest listed minor needs from empty Go caches, then the newest
    minor's Kubernetes with those caches (what `./tasks test` pays on a fresh machine, which
    runs the tier on both). Warm: the oldest's binaries again with the Go caches kept."""
    if benchmark.disabled:
        pytest.skip("a Kubernetes build from nothing: measured by ./tasks bench")
    env = {**os.environ, "LIKEN_K8S_CACHE": str(tmp_path / "bin"),
           "GOMODCACHE": str(tmp_path / "mod"), "GOCACHE": str(tmp_path / "gocache")}
    build = [str(CLUSTER / "build.sh")]
    versions = listed_versions()
    cold = benchmark.pedantic(timed, args=([*build, versions["KUBERNETES_VERSION"]], env, 7000),
                              rounds=1, iterations=1)
    newest = timed([*build, versions["KUBERNETES_NEWEST"]], env, 7000)
    shutil.rmtree(tmp_path / "bin")
    warm = timed([*build, versions["KUBERNETES_VERSION"]], env, 3000)
    subprocess.run(["chmod", "-R", "u+w", str(tmp_path / "mod")], check=False)
    record(benchmark, "cluster", "binaries: cold build (empty Go caches)", [cold], "s",
           note=f"Kubernetes {versions['KUBERNETES_VERSION']}: etcd, containerd, runc, helm, and "
                "kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl; "
                "module downloads included")
    record(benchmark, "cluster", "binaries: the newest minor's Kubernetes after that", [newest],
           "s", note=f"Kubernetes {versions['KUBERNETES_NEWEST']}'s five binaries, the Go caches "
                     "of the cold build kept (its modules downloaded)")
    record(benchmark, "cluster", "binaries: warm build (Go caches kept)", [warm], "s")


@pytest.mark.root
@needs_go
@pytest.mark.timeout(3600)
def test_cluster_start(benchmark: Any) -> None:
    if benchmark.disabled:
        pytest.skip("starts and stops the real cluster: measured by ./tasks bench")
    if subprocess.run(["python3", str(CLUSTER / "cluster.py"), "status"],
                      capture_output=True).returncode == 0:
        pytest.skip("a cluster is running: ./tasks cluster down first")
    env = dict(os.environ)
    cluster = ["python3", str(CLUSTER / "cluster.py")]
    timed([*cluster, "down"], env, 300)
    ups, downs = [], []
    for _ in range(3):
        ups.append(timed([*cluster, "up"], env, 1800))
        downs.append(timed([*cluster, "down"], env, 300))
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    record(benchmark, "cluster", "up: to a Ready node (binaries built)", ups, "s",
           note="certificates, namespaces, etcd, API server, controller manager, scheduler, "
                "containerd with the images imported, kubelet")
    record(benchmark, "cluster", "down: everything ended, the host as it was", downs, "s")


@pytest.mark.root
@needs_go
@pytest.mark.timeout(7200)
def test_whole_test_from_a_fresh_clone(benchmark: Any, tmp_path: Path) -> None:
    """`./tasks test` (what .ci/run calls) on a fresh clone with every build cache empty: the
    Go module, build and binary caches and pip's, and a new venv. The apt packages of
    setup.d are the machine's (installed once, as CI's image would have them); the corpus
    beside the clone is absent, as in CI."""
    if benchmark.disabled:
        pytest.skip("the whole suite from nothing: measured by ./tasks bench")
    if subprocess.run(["python3", str(CLUSTER / "cluster.py"), "status"],
                      capture_output=True).returncode == 0:
        pytest.skip("a cluster is running: ./tasks cluster down first")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = {**os.environ, "CI": "true", "LIKEN_K8S_CACHE": str(tmp_path / "bin"),
           "GOMODCACHE": str(tmp_path / "mod"), "GOCACHE": str(tmp_path / "gocache"),
           "PIP_NO_CACHE_DIR": "1"}
    env.pop("LIKEN_SHARED", None)
    whole = benchmark.pedantic(timed, args=(["bash", str(clone / ".ci" / "run")], env, 7000),
                               rounds=1, iterations=1)
    subprocess.run(["chmod", "-R", "u+w", str(tmp_path / "mod")], check=False)
    record(benchmark, "cluster", "./tasks test from a fresh clone, every build cache empty",
           [whole], "s", note="lint, the main suite, the images, the cluster's binaries built "
                              "from the module proxy for both listed minors, the real-cluster "
                              "tier on each (no corpus)")
