"""``liken-media run`` against the loopback API server (tests/support/fakeapi.py).

The agent asks every render node once at start and publishes; it asks again only when liken's
slice names a render node it has not seen, and no timer asks again (rules: media.query-once); it
re-creates its slice when the kubelet deletes it, without asking any driver again.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from liken_devices.media.agent import MediaAgent, liken_render_names
from liken_devices.media.cli import build_parser, run_options
from liken_devices.media.run import run_agent
from liken_devices.slices import make_slice, validate_slice
from tests.support.fakeapi import FakeApiServer
from tests.support.loopback import get

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


POD_NS = "liken-system"
POD = "media-capabilities-abcde"


class Running:
    def __init__(self, api: FakeApiServer, machine: Machine, tmp_path: Path,
                 *extra: str) -> None:
        self.api = api
        argv = machine.args("--timeout", "3")
        argv[0] = "run"
        argv += ["--kubeconfig", str(api.write_kubeconfig(tmp_path / "kubeconfig")), *extra]
        self.args: argparse.Namespace = build_parser().parse_args(argv)
        self.stop = threading.Event()
        self.agent: MediaAgent | None = None
        self.rc: int | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        def ready(agent: MediaAgent) -> None:
            self.agent = agent

        self.rc = run_agent(run_options(self.args), self.stop, ready)

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
    assert run_agent(run_options(args)) == 2
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


# ---- a render node this pod lacks (rules: media.missing-render-node) ----------------------------


@pytest.fixture
def in_pod(api: FakeApiServer, tmp_path: Path, fake_env: FakeGPUs) -> Iterator[
        tuple[Running, Machine]]:
    """The agent as its DaemonSet runs it: it knows its pod, and serves metrics and probes."""
    api.add_pod(POD_NS, POD, node=NODE)
    machine = Machine(tmp_path / "m", fake_env)
    r = Running(api, machine, tmp_path, "--pod-name", POD, "--pod-namespace", POD_NS,
                "--metrics-port", "0", "--metrics-addr", "127.0.0.1")
    try:
        yield r, machine
    finally:
        r.close()


def _later_gpu(machine: Machine) -> None:
    """A GPU liken publishes now, whose render node is not in the pod's /dev (the claim was
    allocated before it existed)."""
    machine.sys.gpu("0000:03:00.0", card=1, render=129, driver="amdgpu", vendor="1002",
                    device="73bf")


def test_a_render_node_the_pod_lacks_is_published_failed_and_the_pod_evicted(
        in_pod: tuple[Running, Machine], caplog: pytest.LogCaptureFixture) -> None:
    r, machine = in_pod
    machine.gpu("0000:00:02.0", 128, CAPS / "intel-dg2-ihd.txt")
    r.thread.start()
    r.api.wait_for(lambda: r.media_devices() == ["pci-0000-00-02-0"])
    assert r.api.evictions == []
    _later_gpu(machine)
    r.api.put_object("resourceslices", liken_slice("pci-0000-00-02-0", "pci-0000-03-00-0"))
    r.api.wait_for(lambda: r.media_devices() == ["pci-0000-00-02-0", "pci-0000-03-00-0"])
    obj = r.media()
    assert obj is not None
    late = obj["spec"]["devices"][1]["attributes"]
    assert "vaDriver" not in late
    assert all(v == {"bool": False} for k, v in late.items() if "bool" in v)
    assert late["resource.kubernetes.io/pciBusID"] == {"string": "0000:03:00.0"}
    r.api.wait_for(lambda: r.api.evictions == [(POD_NS, POD)])
    said = [rec.getMessage() for rec in caplog.records if "a new pod is needed" in rec.getMessage()]
    assert said == [f"render node pci-0000-03-00-0 ({machine.gpus.dev}/dri/renderD129) is not in "
                    f"this pod: a new pod is needed; evicting pod {POD_NS}/{POD} so the "
                    "DaemonSet's next pod claims it"]
    assert ("create", "pods/eviction") in r.api.verbs
    assert r.agent is not None and r.agent.queried == ["pci-0000-00-02-0", "pci-0000-03-00-0"]
    _, body = get(_endpoint_port(r), "/metrics")
    assert "liken_media_missing_render_nodes 1.0" in body
    assert 'liken_media_render_node_queries_total{result="missing"} 1.0' in body
    # Every request the agent made is one deploy/media/rbac.yaml grants, and it grants no more.
    used = set(r.api.verbs)
    assert used <= _granted(), f"not granted: {sorted(used - _granted())}"
    assert _granted() <= used, f"granted but never used: {sorted(_granted() - used)}"


def _granted() -> set[tuple[str, str]]:
    import yaml

    rbac = Path(__file__).resolve().parents[2] / "deploy" / "media" / "rbac.yaml"
    out = set()
    for doc in yaml.safe_load_all(rbac.read_text()):
        if doc and doc["kind"] in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                out |= {(v, res) for v in rule["verbs"] for res in rule["resources"]}
    return out


def _endpoint_port(r: Running) -> int:
    assert r.agent is not None and r.agent.endpoint_port is not None
    return r.agent.endpoint_port


def test_a_disruption_budget_delays_the_eviction_said_once(
        in_pod: tuple[Running, Machine], caplog: pytest.LogCaptureFixture) -> None:
    r, machine = in_pod
    machine.gpu("0000:00:02.0", 128, CAPS / "intel-dg2-ihd.txt")
    _later_gpu(machine)  # already there at start, and not in the pod either
    r.api.evictions_blocked = 3
    r.thread.start()
    r.api.wait_for(lambda: r.api.evictions == [(POD_NS, POD)], timeout=20)
    refused = [rec for rec in caplog.records if "disruption budget" in rec.getMessage()]
    assert len([rec for rec in refused if rec.levelno >= logging.WARNING]) == 1
    assert r.media_devices() == ["pci-0000-00-02-0", "pci-0000-03-00-0"]


def test_probes_say_ready_once_published(in_pod: tuple[Running, Machine]) -> None:
    r, machine = in_pod
    machine.gpu("0000:00:02.0", 128, CAPS / "intel-dg2-ihd.txt")
    r.thread.start()
    r.api.wait_for(lambda: r.media_devices() == ["pci-0000-00-02-0"])
    r.api.wait_for(lambda: r.agent is not None and r.agent.ready.is_set())
    port = _endpoint_port(r)
    assert get(port, "/healthz")[0] == 200
    r.api.wait_for(lambda: get(port, "/readyz")[0] == 200)
    code, body = get(port, "/metrics")
    assert code == 200 and 'liken_media_render_node_queries_total{result="ok"} 1.0' in body
    assert "liken_media_published_devices 1.0" in body and "_created" not in body
    assert r.api.evictions == []  # every render node is in the pod: nothing to evict


def test_a_busy_metrics_port_is_one_line_and_exit_2(
        api: FakeApiServer, tmp_path: Path, fake_env: FakeGPUs,
        capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from liken_devices.media.cli import main

    machine = Machine(tmp_path / "m", fake_env)
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    argv = machine.args("--timeout", "3")
    argv[0] = "run"
    argv += ["--kubeconfig", str(api.write_kubeconfig(tmp_path / "kubeconfig")),
             "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"]
    try:
        assert main(argv) == 2
    finally:
        holder.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"liken-media: cannot listen on 127.0.0.1:{port}: the port is in use by "
                       "another process (another agent on this node?)")
    assert not any("Traceback" in line for line in err)
