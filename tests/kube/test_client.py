"""The API client: synchronous HTTP/1.1 without the HTTP/2 and asynchronous stacks loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.fakeapi import FakeApiServer

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import sys
{before}
from liken_devices.kube.client import Resources, make_client
client = make_client(__import__("pathlib").Path(sys.argv[1]))
node = client.get(Resources.node(), "n1")
assert node["metadata"]["name"] == "n1", node
print(" ".join(f"{{m}} loaded" if sys.modules.get(m) is not None else f"{{m}} left out"
               for m in ("h2", "anyio")))
"""


def _run(kubeconfig: Path, before: str = "") -> str:
    out = subprocess.run([sys.executable, "-c", PROBE.format(before=before), str(kubeconfig)],
                         capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_client_reads_the_api_without_loading_http2_or_async_io(tmp_path: Path) -> None:
    api = FakeApiServer().start()
    try:
        api.add_node("n1")
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        assert _run(kubeconfig) == "h2 left out anyio left out"
        # A process that uses them for itself keeps them.
        assert _run(kubeconfig, before="import h2.connection, anyio") == "h2 loaded anyio loaded"
    finally:
        api.stop()
