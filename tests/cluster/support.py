"""Talking to the real single-node cluster (scripts/cluster/cluster.py) from a test.

The cluster lives in network and mount namespaces of its own, so every command that reaches it
runs through `cluster.py exec` (nsenter into both namespaces, KUBECONFIG set). Tests drive it
with kubectl, as an operator would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts" / "cluster" / "cluster.py"
STATE = Path(os.environ.get("LIKEN_K8S_STATE", "/var/lib/liken-k8s"))
# Where a failed test keeps the cluster's logs (tests/cluster/conftest.py), one folder a test.
KEPT = Path(os.environ.get("LIKEN_CLUSTER_LOGS") or REPO / "build" / "cluster-logs")
T = TypeVar("T")


class ClusterCommandError(AssertionError):
    pass


def cluster(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["python3", str(CLUSTER), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def keep_logs(nodeid: str) -> str:
    """Copy what the cluster saw (`cluster.py logs`) for the failed test ``nodeid``; say where."""
    dest = KEPT / re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[:200]
    kept = cluster("logs", str(dest), timeout=300)
    return f"kept in {dest}" if kept.returncode == 0 else f"not kept: {kept.stderr.strip()}"


def info() -> dict[str, str]:
    return json.loads((STATE / "cluster.json").read_text())


def inside(*cmd: str, input: str | None = None, check: bool = True, timeout: float = 120,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in the cluster's namespaces with the admin kubeconfig."""
    full = ["python3", str(CLUSTER), "exec", "--", *cmd]
    proc = subprocess.run(full, input=input, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=REPO)
    if check and proc.returncode != 0:
        raise ClusterCommandError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}"
                                  f"{proc.stdout[-2000:]}")
    return proc


def kubectl(*args: str, input: str | None = None, check: bool = True, token: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """kubectl as the admin, or as the holder of ``token`` (no other credentials)."""
    if token is None:
        return inside("kubectl", *args, input=input, check=check, timeout=timeout)
    cfg = info()
    ca = STATE / "config" / "pki" / "ca.crt"
    return inside("kubectl", "--kubeconfig=/dev/null", "--server=https://127.0.0.1:6443",
                  f"--certificate-authority={ca}", f"--token={token}", *args, input=input,
                  check=check, timeout=timeout, env={"LIKEN_K8S_NODE": cfg["node"]})


def get(*args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def apply(docs: Iterable[dict[str, Any]], *extra: str, token: str | None = None,
          check: bool = True) -> subprocess.CompletedProcess[str]:
    # JSON, not YAML: PyYAML writes a string such as "0249" bare, and kubectl's YAML reader
    # takes it for a number.
    items = {"apiVersion": "v1", "kind": "List", "items": list(docs)}
    return kubectl("apply", "-f", "-", *extra, input=json.dumps(items), token=token,
                   check=check)


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 120,
             every: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (ClusterCommandError, KeyError, IndexError, ValueError) as err:
            last = err
        time.sleep(every)
    raise AssertionError(f"{what}: not after {timeout:.0f} s"
                         + (f" (last: {last})" if last else ""))


def node() -> str:
    return info()["node"]


def pod_token(account: str, node: str, name: str = "") -> str:
    """A service-account token bound to a pod on ``node``: the token the kubelet would mint.
    ``name``: the pod's (default ``token-<account>-<node>``)."""
    name = name or f"token-{account}-{node}"
    apply([{"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "liken-system"},
            "spec": {"serviceAccountName": account, "nodeName": node,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "image": "localhost/liken-pause:ci",
                                     "imagePullPolicy": "Never"}]}}])
    uid = get("-n", "liken-system", "pod", name)["metadata"]["uid"]
    return kubectl("-n", "liken-system", "create", "token", account, "--bound-object-kind=Pod",
                   f"--bound-object-name={name}", f"--bound-object-uid={uid}").stdout.strip()
