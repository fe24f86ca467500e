"""Where the node agent's memory goes: each part's share of the resident set.

Fresh interpreters import the agent's parts one more at a time, in the order the agent needs
them, and report ``VmRSS``; each row is what that part adds to the ones above it (the fastest of
three interpreters, since a resident set only grows with noise). The last row asks the catalogs
of a node-sized setup the questions a walk asks (a name from pci.ids and usb.ids, the candidate
modules of a modalias), which is all they hold now that they are read on demand.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .agent_bench import one_ca
from .figures import record

REPO = Path(__file__).resolve().parents[2]

PARTS: tuple[tuple[str, str], ...] = (
    ("interpreter", ""),
    ("the standard library the agent shares (ssl, socket, json, logging, threading, dataclasses,"
     " argparse, pathlib)",
     "import ssl, socket, selectors, json, logging, threading, dataclasses, argparse, pathlib"),
    ("grpcio and protobuf", "import grpc, google.protobuf.message"),
    ("the kubelet contracts' generated stubs",
     "from liken_devices.plugin.gen import dra_v1_pb2_grpc, dra_v1beta1_pb2_grpc,"
     " health_v1alpha1_pb2_grpc, pluginregistration_v1_pb2_grpc"),
    ("lightkube and its HTTP stack", "import lightkube, lightkube.generic_resource"),
    ("the project (agent, plugin, kube, machine side, metrics)",
     "import liken_devices.agent.runner, liken_devices.agent.run, liken_devices.plugin.server,"
     " liken_devices.kube.publisher, liken_devices.machine.side, liken_devices.agent.metrics"),
    ("the API client, made as the agent makes it (its HTTP/1.1 transport)", "CLIENT"),
    ("the catalogs, asked what a walk asks", "CATALOGS"),
)

CLIENT = """
from pathlib import Path
from liken_devices.kube.client import make_client
Path({kc!r}).write_text({config!r})
make_client(Path({kc!r}))
"""
# One cluster CA, as a pod's service account has (without one the client loads the system's whole
# CA store, which no in-cluster agent does); no request is made.
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:1", certificate-authority: {ca}}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""

CATALOGS = """
from pathlib import Path
from liken_devices.inventory.catalogs import Catalogs
c = Catalogs.load(Path({mods!r}), Path({hw!r}))
c.pci.name("8086", "46a6"); c.usb.name("0bda", "2838")
c.candidates("pci:v00008086d000046A6sv00001028sd00000B1Abc03sc00i00")
"""


def _rss_after(code: str) -> float:
    probe = code + "\nimport re as _r\nprint(_r.search(r'VmRSS:\\s+(\\d+)', " \
                   "open('/proc/self/status').read()).group(1))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin"})
    return int(out.stdout.split()[-1]) / 1024


@pytest.mark.benchmark(group="memory-parts")
def test_memory_by_part(benchmark: Any, tmp_path: Path) -> None:
    from .test_machine_apply import big_tree

    mods = big_tree(tmp_path)
    hw = "/usr/share/hwdata" if Path("/usr/share/hwdata/pci.ids").exists() else str(tmp_path)
    code = ""
    steps: list[tuple[str, str]] = []
    for label, imp in PARTS:
        if imp == "CATALOGS":
            imp = CATALOGS.format(mods=str(mods), hw=hw)
        elif imp == "CLIENT":
            ca = one_ca(tmp_path)
            assert ca is not None, "openssl makes the cluster CA (setup.d/60-bench.sh)"
            imp = CLIENT.format(kc=str(tmp_path / "kubeconfig"),
                                config=KUBECONFIG.format(ca=ca))
        code += imp + "\n"
        steps.append((label, code))
    repeats = 1 if benchmark.disabled else 3
    totals: list[list[float]] = []

    def measure() -> None:
        totals.extend([_rss_after(c) for _, c in steps] for _ in range(repeats))

    benchmark.pedantic(measure, rounds=1, iterations=1)
    assert all(len(t) == len(PARTS) and all(x > 0 for x in t) for t in totals)
    if benchmark.disabled:
        return
    best = [min(t[i] for t in totals) for i in range(len(PARTS))]
    for i, (label, _) in enumerate(steps):
        adds = [t[i] - (t[i - 1] if i else 0.0) for t in totals]
        record(benchmark, "memory-parts", label, adds, "MiB",
               note=f"{best[i]:.1f} MiB resident with everything above" if i == len(PARTS) - 1
               else "")
