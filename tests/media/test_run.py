"""``liken-media run`` against the loopback API server (tests/support/fakeapi.py).

The agent asks every render node once at start and publishes; it asks again only when liken's
slice names a render node it has not seen (render-node-capabilities.txt: "No timer queries
again"); it re-creates its slice when the kubelet deletes it, without asking any driver again.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from liken_devices.media.agent import MediaAgent, liken_render_names, run_agent
from liken_devices.media.cli import build_parser
from liken_devices.slices import make_slice, validate_slice
from tests.support.fakeapi import FakeApiServer

from .conftest import CAPS, FakeGPUs
from .test_scan import Machine

NODE = "node-a"
MEDIA = f"{NODE}-media.liken.sh"


def liken_slice(*renders: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    devices = [{"name": n, "allowMultipleAllocations": True,
                "attributes": {"renderNode": {"bool": True}}} for n in renders]
    devices += [{"name": n, "attributes": {"bus": {"string": "usb"}}} for n in extra]
    return make_slice(NODE, "liken.sh", devices)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    server.add_node(NODE, uid="uid-node-a")
    try:
        yield server
    finally:
        server.stop()


class Running:
    def __init__(self, api: FakeApiServer, machine: Machine, tmp_path: Path) -> None:
        self.api = api
        argv = machine.args("--timeout", "3")
        argv[0] = "run"
        argv += ["--kubeconfig", str(api.write_kubeconfig(tmp_path / "kubeconfig"))]
        self.args: argparse.Namespace = build_parser().parse_args(argv)
        self.stop = threading.Event()
        self.agent: MediaAgent | None = None
        self.rc: int | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        def ready(agent: MediaAgent) -> None:
            self.agent = agent

        self.rc = run_agent(self.args, self.stop, ready)

    def media(self) -> dict[str, Any] | None:
        return self.api.get_object("resourceslices", MEDIA)

    def media_devices(self) -> list[str]:
        obj = self.media()
        return [d["name"] for d in obj["spec"]["devices"]] if obj else []

    def close(self) -> None:
        self.stop.set()
        if self.agent is not None:
            self.agent.wake()
        self.thread.join(15)
        assert not self.thread.is_alive()
        assert self.rc == 0


@pytest.fixture
def running(api: FakeApiServer, tmp_path: Path, fake_env: FakeGPUs) -> Iterator[
        tuple[Running, Machine]]:
    machine = Machine(tmp_path / "m", fake_env)
    r = Running(api, machine, tmp_path)
    try:
        yield r, machine
    finally:
        r.close()


def test_liken_render_names() -> None:
    obj = liken_slice("pci-0000-00-02-0", extra=("usb-1-2-1-0",))
    assert liken_render_names(obj) == {"pci-0000-00-02-0"}
    assert liken_render_names(None) == frozenset()


def test_run_queries_at_start_and_only_new_render_nodes(
        running: tuple[Running, Machine]) -> None:
    r, machine = running
    machine.gpu("0000:00:02.0", 128, CAPS / "intel-dg2-ihd.txt")
    r.api.put_object("resourceslices", liken_slice("pci-0000-00-02-0"))
    r.thread.start()
    r.api.wait_for(lambda: r.media_devices() == ["pci-0000-00-02-0"])
    obj = r.media()
    assert obj is not None and validate_slice(obj) == []
    assert obj["spec"]["driver"] == "media.liken.sh"
    attrs = obj["spec"]["devices"][0]["attributes"]
    assert attrs["encodeH264LowPower"] == {"bool": True}
    assert attrs["resource.kubernetes.io/pciBusID"] == {"string": "0000:00:02.0"}
    assert r.agent is not None
    r.api.wait_for(lambda: r.agent is not None and r.agent.walks >= 2)  # the watch's first list
    assert r.agent.queried == ["pci-0000-00-02-0"]

    # liken publishes a change that adds no render node: nothing is asked again.
    walks = r.agent.walks
    r.api.put_object("resourceslices", liken_slice("pci-0000-00-02-0", extra=("usb-1-2-1-0",)))
    # liken publishes a new render node: only that one is asked.
    machine.gpu("0000:03:00.0", 129, CAPS / "amd-rdna2-mesa.txt", driver="amdgpu",
                vendor="1002", device="73bf")
    r.api.put_object("resourceslices", liken_slice("pci-0000-00-02-0", "pci-0000-03-00-0"))
    r.api.wait_for(lambda: r.media_devices() == ["pci-0000-00-02-0", "pci-0000-03-00-0"])
    assert r.agent.queried == ["pci-0000-00-02-0", "pci-0000-03-00-0"]
    assert r.agent.walks == walks + 1  # the unrelated change caused no walk either

    # The kubelet deletes every slice of its node: ours comes back, with no driver asked again.
    # (Wait until the agent has read its own write back: a deletion that lands while the write's
    # answer is still in flight is the publisher's race, not what this test is about.)
    r.api.wait_for(lambda: r.agent is not None and r.agent.publisher.converged)
    assert r.api.kubelet_restart_wipe(NODE) == 2
    r.api.wait_for(lambda: r.media_devices() == ["pci-0000-00-02-0", "pci-0000-03-00-0"])
    assert r.agent.queried == ["pci-0000-00-02-0", "pci-0000-03-00-0"]


def test_run_withdraws_a_removed_render_node(running: tuple[Running, Machine]) -> None:
    r, machine = running
    machine.gpu("0000:00:02.0", 128, CAPS / "intel-dg2-ihd.txt")
    machine.gpu("0000:03:00.0", 129, CAPS / "no-video-processor.txt")
    r.thread.start()
    r.api.wait_for(lambda: r.media_devices() == ["pci-0000-00-02-0", "pci-0000-03-00-0"])
    from tests.support.sysfs_builder import Dev

    machine.sys.remove(Dev("/devices/pci0000:03/0000:03:00.0"))
    r.api.put_object("resourceslices", liken_slice("pci-0000-00-02-0"))
    r.api.wait_for(lambda: r.media_devices() == ["pci-0000-00-02-0"])
    assert r.agent is not None
    assert r.agent.queried == ["pci-0000-00-02-0", "pci-0000-03-00-0"]


def test_run_without_cluster_config_is_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (tmp_path / "sys" / "devices").mkdir(parents=True)
    (tmp_path / "sys" / "dev" / "char").mkdir(parents=True)  # a sysfs tree, if an empty one
    args = build_parser().parse_args(["run", "--sysfs", str(tmp_path / "sys"), "--node", NODE])
    assert run_agent(args) == 2
    assert "give --kubeconfig" in caplog.text


def test_run_as_a_process_stops_on_sigterm(api: FakeApiServer, tmp_path: Path,
                                           fake_env: FakeGPUs) -> None:
    # The console script as the DaemonSet runs it: publishes, then exits 0 on SIGTERM.
    import shutil
    import signal
    import subprocess
    import sys

    machine = Machine(tmp_path / "m", fake_env)
    machine.gpu("0000:00:02.0", 128, CAPS / "nvidia-ampere-nvdec.txt")
    argv = machine.args("--timeout", "3")
    argv[0] = "run"
    argv += ["--kubeconfig", str(api.write_kubeconfig(tmp_path / "kubeconfig"))]
    exe = shutil.which("liken-media") or str(Path(sys.executable).parent / "liken-media")
    proc = subprocess.Popen([exe, *argv], env=fake_env.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        obj = api.wait_for(lambda: api.get_object("resourceslices", MEDIA), timeout=20)
        assert [d["name"] for d in obj["spec"]["devices"]] == ["pci-0000-00-02-0"]
        assert obj["spec"]["devices"][0]["attributes"]["decodeVP8"] == {"bool": True}
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "capabilities: pci-0000-00-02-0 (" in err
    assert "signal 15, stopping" in err
