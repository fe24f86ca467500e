"""``liken-devices run`` as a process: plug and unplug fixture hardware under real uevents, kill -9
it, start it again; the slice and the claim's CDI spec end true every time (docs/agent.md,
"Tests"), and SIGTERM stops it cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakeapi import FakeApiServer
from tests.support.loopback import free_port

from .node import FixtureNode, is_root, synthetic_uevent

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(not is_root(), reason="real uevents")]

REPO = Path(__file__).resolve().parents[2]


class AgentProcess:
    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "liken_devices.cli", *self.args],
                                         stdout=out, stderr=out, env=env)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def term(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(15)

    def ensure_dead(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def test_plug_unplug_kill_restart(api: FakeApiServer, tmp_path: Path) -> None:
    from tests.plugin.kubelet import TestKubelet

    name = f"proc-{os.getpid()}"
    node = FixtureNode(tmp_path / "node")
    api.add_node(name)
    api.add_machine(name, {})
    cdi_dir, registry = tmp_path / "cdi", tmp_path / "registry"
    port = free_port()
    args = ["run", "--node", name, *node.args(), "-v", "--metrics-port", str(port),
            "--metrics-addr", "127.0.0.1",
            "--kubeconfig", str(api.write_kubeconfig(tmp_path / "kubeconfig")),
            "--console", str(tmp_path / "console"), "--cdi-dir", str(cdi_dir),
            "--state-dir", str(tmp_path / "state"), "--plugin-dir", str(tmp_path / "plugin"),
            "--registry-dir", str(registry), "--no-machine-side"]
    agent = AgentProcess(args, tmp_path / "agent.log")

    def names() -> list[str]:
        obj = api.get_object("resourceslices", f"{name}-liken.sh")
        return [d["name"] for d in (obj or {}).get("spec", {}).get("devices") or []]

    def spec_paths(uid: str) -> list[str]:
        spec: dict[str, Any] = json.loads((cdi_dir / f"liken.sh-{uid}.json").read_text())
        return [n["path"] for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]]

    gpu = ["pci-0000-00-02-0", "pci-0000-00-02-0-display"]
    dongle = node.plug_usb(2, devnum=3)
    agent.start()
    kubelet = None
    try:
        api.wait_for(lambda: names() == sorted([*gpu, dongle]), 30)
        # The kubelet prepares a claim on the dongle through the embedded plugin.
        kubelet = TestKubelet(registry / "liken.sh-reg.sock")
        api.wait_for(lambda: (registry / "liken.sh-reg.sock").exists(), 10)
        kubelet.register()
        claim = api.add_claim("default", "dongle", results=[{"device": dongle}], node=name)
        uid = claim["metadata"]["uid"]
        answer = kubelet.prepare([("default", uid, "dongle")])[uid]
        assert answer.error == ""
        assert spec_paths(uid) == ["/dev/hidraw2", "/dev/bus/usb/001/003"]
        # The embedded plugin's claims are counted by the agent's metrics, and with the kubelet's
        # registration and the slice written the agent is ready.
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        assert b'liken_devices_claims_prepared_total{result="ok"} 1.0' in metrics
        assert b"liken_devices_registered 1.0" in metrics
        ready = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert ready.status == 200

        # Unplug: the slice loses it, the claim's spec names nodes that do not exist.
        node.unplug_usb(2)
        synthetic_uevent("remove")
        api.wait_for(lambda: names() == gpu, 10)
        api.wait_for(lambda: spec_paths(uid)[0].startswith("/dev/.liken.sh-absent/"), 5)

        # kill -9, and the dongle comes back (with a new device number) while nothing runs.
        kubelet.close()
        agent.kill9()
        node.plug_usb(2, devnum=9)
        generation = api.get_object("resourceslices", f"{name}-liken.sh")["spec"]["pool"][  # type: ignore[index]
            "generation"]
        agent.start()
        api.wait_for(lambda: names() == sorted([*gpu, dongle]), 30)
        api.wait_for(lambda: spec_paths(uid) == ["/dev/hidraw2", "/dev/bus/usb/001/009"], 10)
        obj = api.get_object("resourceslices", f"{name}-liken.sh")
        assert obj is not None and obj["spec"]["pool"]["generation"] == generation + 1

        # Killed again with the slice deleted meanwhile (a kubelet restart): it comes back.
        agent.kill9()
        api.kubelet_restart_wipe(name)
        node.unplug_gpu()
        agent.start()
        api.wait_for(lambda: names() == [dongle], 30)

        # SIGTERM: a clean exit, the plugin's sockets removed, the state and specs kept.
        assert agent.term() == 0
        assert not (registry / "liken.sh-reg.sock").exists()
        assert not (tmp_path / "plugin" / "dra.sock").exists()
        assert (cdi_dir / f"liken.sh-{uid}.json").exists()
        log = (tmp_path / "agent.log").read_text()
        assert "published ResourceSlice" in log and "stopped" in log
    finally:
        if kubelet is not None:
            kubelet.close()
        agent.ensure_dead()


def test_sigterm_while_idle_is_prompt(api: FakeApiServer, tmp_path: Path) -> None:
    name = f"idle-{os.getpid()}"
    node = FixtureNode(tmp_path / "node")
    api.add_node(name)
    agent = AgentProcess(["run", "--node", name, *node.args(), "--no-plugin",
                          "--no-machine-side", "--kubeconfig",
                          str(api.write_kubeconfig(tmp_path / "kubeconfig")),
                          "--console", str(tmp_path / "console")], tmp_path / "agent.log")
    agent.start()
    try:
        api.wait_for(lambda: api.get_object("resourceslices", f"{name}-liken.sh"), 30)
        time.sleep(0.5)
        started = time.monotonic()
        assert agent.term() == 0
        assert time.monotonic() - started < 3
    finally:
        agent.ensure_dead()
